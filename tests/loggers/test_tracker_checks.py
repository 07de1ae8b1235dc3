"""Trackers that could not start are refused before any work, in one line with the exit code of a config error,
leaving nothing on disk: W&B with no login on this machine (the real wandb package, a clean home and WANDB_DIR,
no key), an MLflow server that does not answer, an MLflow store that cannot be written. A tracker that fails at
its start all the same costs only itself.

The runs go through the classification task's entry point (``basetrainer train``, examples/example.py) with its
default data folder: the check comes before the digits are written there.
"""
import http.server
import os
import threading

import pytest

from basetrainer.errors import ConfigError
from basetrainer.loggers import build_loggers, check_loggers
from basetrainer.tasks import classification
from support import EXAMPLES, WORKERS
from support.processes import free_port, run_python

NO_LOGIN = ("loggers: wandb has no API key on this machine: log in with `wandb login` (or set WANDB_API_KEY), or "
            "keep the run on this machine with wandb_mode=offline (wandb sync uploads it later)")
WANDB_SETTINGS = ("WANDB_API_KEY", "WANDB_MODE", "WANDB_IDENTITY_TOKEN_FILE", "WANDB_CONFIG_DIR", "NETRC",
                  "MLFLOW_TRACKING_URI")


@pytest.fixture
def clean_machine(tmp_path, monkeypatch):
    """A machine where W&B was never logged in: an empty home, an empty WANDB_DIR, no key, no mode, and an
    empty current folder; yields that folder."""
    for name in WANDB_SETTINGS:
        monkeypatch.delenv(name, raising=False)
    for folder in ("home", "wandb", "cwd"):
        (tmp_path / folder).mkdir()
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wandb"))
    monkeypatch.chdir(tmp_path / "cwd")
    return tmp_path / "cwd"


def files_under(root):
    return sorted(os.path.relpath(os.path.join(folder, name), root)
                  for folder, folders, files in os.walk(root) for name in folders + files)


def refused(capsys, *argv):
    """Runs ``basetrainer train argv`` in this process; returns its exit code and what it wrote on stderr."""
    with pytest.raises(SystemExit) as stop:
        classification.main(["--work_dir", "work", "--no-progress", *argv])
    return stop.value.code, capsys.readouterr().err


# ---------------------------------------------------------------------- W&B
def test_wandb_without_a_login_is_refused_before_any_work(clean_machine, tmp_path, capsys):
    code, err = refused(capsys, "loggers=[tensorboard,csv,wandb]")
    assert (code, err) == (2, f"error: {NO_LOGIN}\n")
    assert files_under(tmp_path) == ["cwd", "home", "wandb"]


def test_wandb_mode_offline_needs_no_login(clean_machine):
    check_loggers(["wandb"], {"wandb_mode": "offline"})
    (logger,) = build_loggers(["wandb"], ".", {"wandb_mode": "offline"})
    assert logger.mode == "offline"


@pytest.mark.parametrize("setting", [("WANDB_API_KEY", "k" * 40), ("WANDB_MODE", "offline"),
                                     ("WANDB_MODE", "disabled")])
def test_a_key_or_an_offline_mode_in_the_environment_passes_the_check(clean_machine, monkeypatch, setting):
    monkeypatch.setenv(*setting)
    check_loggers(["wandb"], {})


def test_a_wandb_login_saved_in_a_netrc_passes_the_check(clean_machine, tmp_path):
    (tmp_path / "home" / ".netrc").write_text("machine api.wandb.ai\n  login user\n  password " + "k" * 40 + "\n")
    check_loggers(["wandb"], {})


def test_an_unknown_wandb_mode_is_a_one_line_error(clean_machine):
    with pytest.raises(ConfigError, match=r"^wandb_mode: 'ofline' is not one of online, offline, disabled"):
        check_loggers(["wandb"], {"wandb_mode": "ofline"})


@pytest.mark.slow  # starts Python, and W&B its service
def test_the_refusal_is_what_wandb_itself_would_answer_and_the_example_exits_with_it(clean_machine, tmp_path):
    login = run_python(["-c", "import wandb; print(wandb.login(prompt=False, verify=False))"], cwd=clean_machine,
                       timeout=120)
    assert login.stdout.split() == ["False"], login.stderr
    result = run_python([EXAMPLES / "example.py", "loggers=[tensorboard,csv,wandb]"], cwd=clean_machine)
    assert (result.returncode, result.stderr) == (2, f"error: {NO_LOGIN}\n")
    assert files_under(tmp_path) == ["cwd", "home", "wandb"]


@pytest.mark.slow  # starts Python, and W&B its service
def test_a_tracker_that_fails_at_its_start_costs_only_itself(clean_machine, tmp_path):
    """LogHistory given W&B directly, with no check before: wandb.init fails on this machine, the run goes on."""
    result = run_python([WORKERS / "unchecked_tracker_worker.py", tmp_path / "log"], env={"WANDB_SILENT": "true"},
                        cwd=clean_machine, timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    failures = [line for line in result.stderr.splitlines() if "failed in" in line]
    assert len(failures) == 1 and "logger wandb failed in start and is dropped" in failures[0]
    assert "Traceback" not in result.stderr
    assert len((tmp_path / "log" / "history.csv").read_text().splitlines()) == 3  # the header and 2 epochs


# ---------------------------------------------------------------------- MLflow
def test_an_mlflow_server_that_does_not_answer_is_refused_before_any_work(clean_machine, tmp_path, capsys):
    uri = f"http://127.0.0.1:{free_port()}"
    code, err = refused(capsys, "loggers=[mlflow]", f"mlflow_tracking_uri={uri}")
    assert code == 2
    assert err.startswith(f"error: mlflow_tracking_uri {uri}: the MLflow tracking server does not answer "
                          f"(Connection refused); start it (mlflow server), or set mlflow_tracking_uri to one")
    assert err.count("\n") == 1 and files_under(tmp_path) == ["cwd", "home", "wandb"]


class Answers(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_error(401)  # a server behind a login answers too

    def log_message(self, *args):
        pass


def test_an_mlflow_server_that_answers_passes_the_check():
    server = http.server.HTTPServer(("127.0.0.1", 0), Answers)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        check_loggers(["mlflow"], {"mlflow_tracking_uri": f"http://127.0.0.1:{server.server_port}"})
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("store", ["{blocker}/mlruns", "file://{blocker}/mlruns", "sqlite:///{blocker}/mlflow.db"])
def test_an_mlflow_store_that_cannot_be_written_is_refused(clean_machine, tmp_path, capsys, store):
    blocker = tmp_path / "blocker"
    blocker.write_text("a file where the store's folder would be\n")
    uri = store.format(blocker=blocker)
    code, err = refused(capsys, "loggers=[mlflow]", f"mlflow_tracking_uri={uri}")
    assert (code, err) == (2, f"error: mlflow_tracking_uri {uri}: MLflow cannot write its store there ({blocker} "
                              f"is a file); point mlflow_tracking_uri at a place that can be written, or set it "
                              f"to null for a store under work_dir\n")
    assert files_under(tmp_path) == ["blocker", "cwd", "home", "wandb"]


def test_a_writable_mlflow_store_passes_the_check(tmp_path):
    check_loggers(["mlflow"], {"mlflow_tracking_uri": f"sqlite:///{tmp_path}/new/mlflow.db"})
    check_loggers(["mlflow"], {"work_dir": str(tmp_path / "work")})
    assert files_under(tmp_path) == []
