"""The one class of errors that bad input raises."""

import re

#: How NumPy 2 writes a scalar inside a list or a repr (``np.int64(3)``, ``np.str_('a')``).
_NUMPY_SCALAR = re.compile(r"np\.(?:u?int|float|str_)\d*\(([^()]*)\)|np\.(True|False)_")


class InputError(ValueError):
    """A setting, file, data set or device that cannot be used, named in the message with
    what was expected. The command line prints it and exits with status 2, before any
    result is written; as a ValueError it is what scikit-learn expects from bad parameters.
    NumPy scalars in the message read as their values (``[3, 7]``, not ``[np.int64(3), ...]``),
    however the message formatted them."""

    def __init__(self, message: object = "", *args: object) -> None:
        super().__init__(_NUMPY_SCALAR.sub(lambda found: found[1] or found[2], str(message)), *args)


class Terminated(BaseException):
    """The process was asked to stop (SIGTERM: a scheduler's cancel or time limit; SIGINT:
    Ctrl-C); ``signum`` is the signal's number."""

    @property
    def signum(self) -> int:
        return int(self.args[1]) if len(self.args) > 1 else 15


class TrainingDiverged(InputError):
    """The training loss stopped being a finite number: the settings (most often the
    learning rate) or the inputs' scale make training diverge. Refused like bad input
    (exit 2, one line), though it is found only once training runs."""
