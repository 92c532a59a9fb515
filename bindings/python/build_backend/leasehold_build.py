"""The package's PEP 517 build backend: maturin, which stops at once where no Rust toolchain is.

maturin, finding no ``cargo`` on PATH, would download a Rust toolchain and every crate (about
1 GB, into the user's cache) before building; offline or behind a proxy that fails far from
its cause. A wheel is built only with cargo on PATH; without it the build fails here with one
line saying what to install, and where a prebuilt wheel is.
"""

from __future__ import annotations

import os
import shutil
import sys

# maturin reads this when it starts a build: never fetch a toolchain of its own.
os.environ["MATURIN_NO_INSTALL_RUST"] = "1"

import maturin
from maturin import *  # noqa: E402,F401,F403  (the PEP 517 hooks this module does not wrap)

NEED_RUST = (
    "leasehold-lock: building from source needs Rust 1.88 or later (cargo on PATH; "
    "https://rustup.rs); a prebuilt wheel installs without it: "
    "pip install --only-binary leasehold-lock leasehold-lock"
)


def _need_cargo() -> None:
    if shutil.which("cargo") is None:
        print(NEED_RUST, file=sys.stderr)
        raise SystemExit(1)


def get_requires_for_build_wheel(config_settings=None):
    _need_cargo()
    return maturin.get_requires_for_build_wheel(config_settings)


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    _need_cargo()
    return maturin.prepare_metadata_for_build_wheel(metadata_directory, config_settings)


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    _need_cargo()
    return maturin.build_wheel(wheel_directory, config_settings, metadata_directory)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    _need_cargo()
    return maturin.build_editable(wheel_directory, config_settings, metadata_directory)
