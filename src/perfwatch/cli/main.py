"""The `perfwatch` command group.

Each verb lives in its own module and is imported only when it is invoked, so
`perfwatch analyze` does not pay for the Pulsar client or the web stack.
"""

from __future__ import annotations

import importlib

import click

from perfwatch import __version__
from perfwatch.cli.errors import CommandLineGroup

# verb -> "module:attribute" of a click.Command
COMMANDS: dict[str, str] = {
    "profile": "perfwatch.cli.profile:profile",
    "recommend": "perfwatch.cli.recommend:recommend",
    "dev": "perfwatch.cli.dev:dev",
    "publish": "perfwatch.cli.publish:publish",
    "watch": "perfwatch.cli.watch:watch",
    "forward": "perfwatch.cli.forward:forward",
    "analyze": "perfwatch.cli.analyze:analyze",
    "serve": "perfwatch.cli.serve:serve",
    "dashboard": "perfwatch.cli.dashboard:dashboard",
    "demo": "perfwatch.cli.demo:demo",
    "compare": "perfwatch.cli.compare:compare",
}


class LazyGroup(CommandLineGroup):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = COMMANDS.get(cmd_name)
        if target is None:
            return None
        module_name, attribute = target.split(":")
        return getattr(importlib.import_module(module_name), attribute)


@click.group(
    "perfwatch",
    cls=LazyGroup,
    context_settings={"help_option_names": ["-h", "--help"], "show_default": True},
)
@click.version_option(__version__, prog_name="perfwatch")
def main() -> None:
    """Detect performance regressions in CI results, offline or on a Pulsar stream."""
