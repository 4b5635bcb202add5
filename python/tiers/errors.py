"""The one exception type for errors a user can cause or fix."""


class TiersError(Exception):
    """A failure to report as one line on stderr (bad input, missing tool,
    failed run).  The command line turns it into ``tiers: error: MESSAGE``
    and exit status ``code``."""

    def __init__(self, message: str, code: int = 2):
        super().__init__(message)
        self.code = code
