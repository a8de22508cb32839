"""kairos_sdk.__version__ is the installed distribution's version."""

from importlib.metadata import version

import kairos_sdk


def test_the_package_says_its_version() -> None:
    assert kairos_sdk.__version__ == version("kairos-sdk")
