"""The event protocol: events are an enum, a misnamed handler is reported, one event may have its own priority."""
import logging

import pytest

from basetrainer.engine.events import EVENTS, LOW, LOWEST, Callback, CallbackList, Event


class Recorder(Callback):
    def __init__(self, name, calls, **attributes):
        super().__init__()
        self.name, self.calls = name, calls
        self.__dict__.update(attributes)

    def on_epoch_end(self, epoch, logs=None):
        self.calls.append((self.name, "on_epoch_end"))

    def on_train_end(self, logs=None):
        self.calls.append((self.name, "on_train_end"))


def test_the_events_are_an_enum_whose_values_are_the_handler_names_in_firing_order():
    assert [event.value for event in Event] == list(EVENTS)
    assert EVENTS[0] == "on_train_begin" and EVENTS[-1] == "on_exception"
    assert Event.EPOCH_END == "on_epoch_end" and str(Event.EPOCH_END) == "on_epoch_end"
    assert all(hasattr(Callback, event.value) for event in Event)


def test_firing_a_name_that_is_no_event_is_an_error_naming_the_events():
    with pytest.raises(ValueError, match="'on_epoch_ends' is no event; the events are on_train_begin, "):
        CallbackList([]).fire("on_epoch_ends", 0, {})


def test_an_event_fires_by_member_and_by_name_alike():
    calls = []
    events = CallbackList([Recorder("a", calls)])
    events.fire(Event.EPOCH_END, 0, {})
    events.fire("on_epoch_end", 1, {})
    assert calls == [("a", "on_epoch_end")] * 2


def test_a_misnamed_handler_is_reported_with_the_event_it_was_meant_for(caplog):
    class Typo(Callback):
        def on_epoch_ends(self, epoch, logs=None):
            pass

    with caplog.at_level(logging.WARNING, logger="basetrainer"):
        CallbackList([Typo()])
    assert "Typo.on_epoch_ends is no event, so the loop never calls it; did you mean on_epoch_end?" in caplog.text


def test_one_event_may_run_at_a_priority_of_its_own():
    calls = []
    writer = Recorder("writer", calls, priority=LOW, priorities={Event.TRAIN_END: LOWEST + 10})
    checkpoint = Recorder("checkpoint", calls, priority=LOWEST)
    events = CallbackList([writer, checkpoint])
    events.fire(Event.EPOCH_END, 0, {})
    events.fire(Event.TRAIN_END, {})
    assert calls == [("writer", "on_epoch_end"), ("checkpoint", "on_epoch_end"),
                     ("checkpoint", "on_train_end"), ("writer", "on_train_end")]
