"""Started with every Python process of the filelock suite's run (it is on PYTHONPATH): with
``LEASEHOLD_FILELOCK_SUBSTITUTE`` set, puts leasehold's classes into ``filelock`` (see
``leasehold_filelock_substitute``)."""

import os

if os.environ.get("LEASEHOLD_FILELOCK_SUBSTITUTE"):
    import leasehold_filelock_substitute  # noqa: F401
