"""The one class of errors that bad input raises."""


class InputError(ValueError):
    """A setting, file, data set or device that cannot be used, named in the message with
    what was expected. The command line prints it and exits with status 2, before any
    result is written; as a ValueError it is what scikit-learn expects from bad parameters."""


class Terminated(BaseException):
    """The process was asked to stop (SIGTERM: a scheduler's cancel or time limit)."""


class TrainingDiverged(InputError):
    """The training loss stopped being a finite number: the settings (most often the
    learning rate) or the inputs' scale make training diverge. Refused like bad input
    (exit 2, one line), though it is found only once training runs."""
