"""The `perfwatch` command group.

Each verb lives in its own module and is imported only when it is invoked, so
`perfwatch analyze` does not pay for the Pulsar client or the web stack, and
`perfwatch --help` imports no command module at all: it lists the summaries below.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

import click

from perfwatch import __version__
from perfwatch.cli.errors import CommandLineGroup


@dataclass(frozen=True)
class CommandEntry:
    target: str  # "module:attribute" of a click.Command
    summary: str  # the line `perfwatch --help` shows


COMMANDS: dict[str, CommandEntry] = {
    "analyze": CommandEntry(
        "perfwatch.cli.analyze:analyze",
        "Find change points in result histories (CSV or JSON Lines).",
    ),
    "compare": CommandEntry(
        "perfwatch.cli.compare:compare",
        "Check one run's counters against a baseline of good runs.",
    ),
    "dashboard": CommandEntry(
        "perfwatch.cli.dashboard:dashboard",
        "Serve the web dashboard: series, change points, live verdicts.",
    ),
    "dead-letters": CommandEntry(
        "perfwatch.cli.dead_letters:dead_letters",
        "Print the dead letters kept on the broker, with their reasons.",
    ),
    "demo": CommandEntry(
        "perfwatch.cli.demo:demo",
        "Run the whole pipeline on a generated CI history.",
    ),
    "dev": CommandEntry(
        "perfwatch.cli.dev:dev",
        "Run a local Pulsar broker for development and tests.",
    ),
    "forward": CommandEntry(
        "perfwatch.cli.forward:forward",
        "POST alerts to a webhook, in order, with retries.",
    ),
    "profile": CommandEntry(
        "perfwatch.cli.profile:profile",
        "Run pytest and profile every test and parametrized input.",
    ),
    "publish": CommandEntry(
        "perfwatch.cli.publish:publish",
        "Validate result files and publish them to the records topic.",
    ),
    "recommend": CommandEntry(
        "perfwatch.cli.recommend:recommend",
        "Say whether a code update needs the full performance suite.",
    ),
    "serve": CommandEntry(
        "perfwatch.cli.serve:serve",
        "Consume records, detect change points and publish verdicts.",
    ),
    "watch": CommandEntry(
        "perfwatch.cli.watch:watch",
        "Print verdicts as they are published.",
    ),
}


class LazyGroup(CommandLineGroup):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        entry = COMMANDS.get(cmd_name)
        if entry is None:
            return None
        module_name, attribute = entry.target.split(":")
        return getattr(importlib.import_module(module_name), attribute)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # click's own version loads every command for its short help; the summaries do not.
        rows = [(name, COMMANDS[name].summary) for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(
    "perfwatch",
    cls=LazyGroup,
    context_settings={"help_option_names": ["-h", "--help"], "show_default": True},
)
@click.version_option(__version__, prog_name="perfwatch")
def main() -> None:
    """Detect performance regressions in CI results, offline or on a Pulsar stream."""
