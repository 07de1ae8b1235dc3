"""A pickle payload that runs code when unpickled: what a safe loader must refuse."""


class Payload:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))  # creates a file if it is ever unpickled
