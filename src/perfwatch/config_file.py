"""Which configuration file a command reads, told without loading `perfwatch.config`.

`perfwatch.config` validates with pydantic, which takes a noticeable part of a
short command's run; `perfwatch analyze` uses the file only for `[directions]`
and `[analyzer]`, so it asks here first and loads the configuration only when
there is a file to read.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

CONFIG_ENV_VAR = "PERFWATCH_CONFIG"
DEFAULT_CONFIG_FILE = "perfwatch.toml"


def config_file_in_use(
    path: str | Path | None = None, env: Mapping[str, str] | None = None
) -> Path | None:
    """The file to read: `path`, else `$PERFWATCH_CONFIG`, else `./perfwatch.toml` when it
    exists; None when there is none. A path named by `path` or the variable is returned
    whether it exists or not: a file asked for and missing is an error for the reader."""
    env = os.environ if env is None else env
    if path is not None:
        return Path(path)
    if CONFIG_ENV_VAR in env:
        return Path(env[CONFIG_ENV_VAR])
    default = Path(DEFAULT_CONFIG_FILE)
    return default if default.exists() else None
