"""Who and what a record belongs to: test, run id, commit, branch, time, attributes.

Precedence, highest first: what the user says on the command line (or to the
API), what the record or the tool's report already carries, what the CI
system says in its environment (GitHub Actions, GitLab CI, Jenkins,
Buildkite), what `git` says about the working directory.

Run ids are not taken from CI: a build id is shared by every job and every
test of a build, so it cannot tell two records of one test apart. A record
with no run id gets one derived from its content, so publishing the same file
again yields the same ids and the processor ignores the copies.
"""

from __future__ import annotations

import hashlib
import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import orjson

from perfwatch.contract.validation import RECORD_SCHEMA

_IDENTITY_KEYS = ("test", "run_id", "commit", "branch", "timestamp", "attributes")


@dataclass(frozen=True)
class Identity:
    """Identity fields, each optional; `None` means "not known here"."""

    test: str | None = None
    run_id: str | None = None
    commit: str | None = None
    branch: str | None = None
    timestamp: str | None = None
    attributes: Mapping[str, str] = field(default_factory=dict)
    # The temporary merge of a pull request CI built instead of `commit`, its head: what a
    # report or git names then, and what the pull request's records do not belong to.
    merge_commit: str | None = None

    def over(self, fallback: Identity) -> Identity:
        """These fields where set, `fallback`'s elsewhere; attributes merged, ours winning."""
        merged = {
            item.name: getattr(self, item.name)
            if getattr(self, item.name) is not None
            else getattr(fallback, item.name)
            for item in fields(self)
            if item.name != "attributes"
        }
        return Identity(**merged, attributes={**fallback.attributes, **self.attributes})


def _first(env: Mapping[str, str], *names: str) -> str | None:
    for name in names:
        value = env.get(name, "").strip()
        if value:
            return value
    return None


def _usable_commit(value: str | None) -> str | None:
    # Buildkite reports "HEAD" when a build was triggered without a commit.
    return None if value is None or value == "HEAD" else value


# GitHub Actions events whose GITHUB_SHA is not the pull request's own commit: the merge
# of the pull request into its base (pull_request), or the base's last one (_target).
_PULL_REQUEST_EVENTS = ("pull_request", "pull_request_target")


def _pull_request_head(env: Mapping[str, str]) -> str | None:
    """The head commit of the pull request a GitHub Actions run is for, from the event's
    payload (the file GITHUB_EVENT_PATH names); None for other events or no payload."""
    if env.get("GITHUB_EVENT_NAME") not in _PULL_REQUEST_EVENTS:
        return None
    try:
        event = orjson.loads(Path(env.get("GITHUB_EVENT_PATH", "")).read_bytes())
        head = event["pull_request"]["head"]["sha"]
    except (OSError, orjson.JSONDecodeError, KeyError, TypeError):
        return None
    return head if isinstance(head, str) and head.strip() else None


# A GitHub merge queue builds a temporary branch, gh-readonly-queue/BASE/pr-N-SHA, whose
# commit becomes BASE's when the queue merges it.
_MERGE_QUEUE_REF = re.compile(r"gh-readonly-queue/(?P<base>.+)/pr-\d+-[0-9a-f]{40}")


def _merge_queue_base(env: Mapping[str, str]) -> str | None:
    """The branch a GitHub merge queue build is to land on; None for other builds."""
    if env.get("GITHUB_EVENT_NAME") != "merge_group":
        return None
    match = _MERGE_QUEUE_REF.fullmatch(env.get("GITHUB_REF_NAME", "").strip())
    return match["base"] if match else None


def _branch(env: Mapping[str, str], tag: bool, source: str, ref: str) -> str | None:
    """A pull request's `source` branch, else the `ref` built, unless that is a `tag`: a tag
    build's ref names the tag, no branch (git has none either, checked out at the tag)."""
    return _first(env, source) or (None if tag else _first(env, ref))


def ci_identity(env: Mapping[str, str]) -> Identity:
    """Commit and branch from the variables of the CI system the process runs in."""
    if env.get("GITHUB_ACTIONS") == "true":
        # GITHUB_HEAD_REF is the source branch of a pull request; REF_NAME is "123/merge" then.
        tag = env.get("GITHUB_REF_TYPE") == "tag"
        # a merge queue's temporary branch would start a history per pull request
        branch = _merge_queue_base(env) or _branch(env, tag, "GITHUB_HEAD_REF", "GITHUB_REF_NAME")
        head, built = _pull_request_head(env), _first(env, "GITHUB_SHA")
        if head is None:
            return Identity(commit=built, branch=branch)
        # pull_request_target builds the base branch's commit, which is no merge
        merge = built if env.get("GITHUB_EVENT_NAME") == "pull_request" else None
        return Identity(commit=head, branch=branch, merge_commit=merge)
    if env.get("GITLAB_CI") == "true":
        tag = _first(env, "CI_COMMIT_TAG") is not None
        branch = _branch(env, tag, "CI_MERGE_REQUEST_SOURCE_BRANCH_NAME", "CI_COMMIT_REF_NAME")
        # A merged results pipeline builds a merge of the source and target branches
        # (CI_COMMIT_SHA); the merge request's own commit is then SOURCE_BRANCH_SHA, which
        # other pipelines leave empty.
        head, built = (
            _first(env, "CI_MERGE_REQUEST_SOURCE_BRANCH_SHA"),
            _first(env, "CI_COMMIT_SHA"),
        )
        if head is None:
            return Identity(commit=built, branch=branch)
        return Identity(commit=head, branch=branch, merge_commit=built)
    if env.get("BUILDKITE") == "true":
        tag = _first(env, "BUILDKITE_TAG") is not None
        return Identity(
            commit=_usable_commit(_first(env, "BUILDKITE_COMMIT")),
            branch=None if tag else _first(env, "BUILDKITE_BRANCH"),
        )
    if _first(env, "JENKINS_URL"):
        branch = _first(env, "BRANCH_NAME", "GIT_LOCAL_BRANCH", "GIT_BRANCH")
        if _first(env, "TAG_NAME") is not None:  # a multibranch job's tag build
            branch = None
        elif branch is not None and branch.startswith("origin/"):
            branch = branch.removeprefix("origin/")
        return Identity(commit=_first(env, "GIT_COMMIT"), branch=branch)
    return Identity()


def _git(cwd: Path, *args: str) -> str | None:
    try:
        completed = subprocess.run(
            ["git", *args], cwd=cwd, capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    output = completed.stdout.strip()
    return output if completed.returncode == 0 and output else None


def git_identity(cwd: Path) -> Identity:
    """Commit and branch of the repository `cwd` is in; nothing outside a repository."""
    commit = _git(cwd, "rev-parse", "HEAD")
    if commit is None:
        return Identity()
    branch = _git(cwd, "symbolic-ref", "--quiet", "--short", "HEAD")  # None when detached
    return Identity(commit=commit, branch=branch)


def environment_identity(env: Mapping[str, str], cwd: Path) -> Identity:
    return ci_identity(env).over(git_identity(cwd))


def record_label(record: Mapping[str, Any], where: str) -> str:
    """How messages about one record name it: where it came from, its test and run id."""
    return f"{where} (test {record.get('test')!r}, run {record.get('run_id')!r})"


def content_run_id(record: Mapping[str, Any]) -> str:
    """A run id that depends only on the record's content (its run id excluded)."""
    content = {key: value for key, value in record.items() if key != "run_id"}
    digest = hashlib.sha256(orjson.dumps(content, option=orjson.OPT_SORT_KEYS)).hexdigest()
    return f"sha256-{digest[:32]}"


def complete_record(
    partial: Mapping[str, Any],
    *,
    explicit: Identity,
    defaults: Identity,
    test_prefix: str | None = None,
    fallback_timestamp: str | None = None,
) -> dict[str, Any]:
    """A full record from a partial one.

    `explicit` fields replace the record's, `defaults` fill what it lacks.
    `test_prefix` is put before the record's own test id (`PREFIX/name`), for
    reports that name many benchmarks. The run id, when missing, is derived
    from the content before `fallback_timestamp` is filled in, so that a time
    taken from outside the content (a file's modification time) does not
    change it.
    """
    attributes = partial.get("attributes")
    own = Identity(
        test=partial.get("test"),
        run_id=partial.get("run_id"),
        commit=partial.get("commit"),
        branch=partial.get("branch"),
        timestamp=partial.get("timestamp"),
        attributes=attributes if isinstance(attributes, Mapping) else {},
    )
    if test_prefix is not None and own.test is not None:
        own = replace(own, test=f"{test_prefix}/{own.test}")
    if own.commit is not None and own.commit == defaults.merge_commit:
        own = replace(own, commit=None)  # CI's merge of a pull request: its head instead
    identity = explicit.over(own).over(defaults)

    record: dict[str, Any] = {"schema": partial.get("schema", RECORD_SCHEMA)}
    for key in _IDENTITY_KEYS:
        value = getattr(identity, key)
        if value:  # an empty string or mapping is "not set"
            record[key] = dict(value) if key == "attributes" else value
    if attributes is not None and not isinstance(attributes, Mapping):
        record["attributes"] = attributes  # left for schema validation to report
    record.update(
        {key: value for key, value in partial.items() if key not in ("schema", *_IDENTITY_KEYS)}
    )
    if "run_id" not in record:
        record["run_id"] = content_run_id(record)
    if "timestamp" not in record and fallback_timestamp is not None:
        record["timestamp"] = fallback_timestamp
    ordered = {key: record[key] for key in ("schema", *_IDENTITY_KEYS) if key in record}
    ordered.update({key: value for key, value in record.items() if key not in ordered})
    return ordered
