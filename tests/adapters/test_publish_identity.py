"""Record identity: CI variables, git, flags, and run ids derived from content."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from perfwatch.adapters.identity import (
    Identity,
    ci_identity,
    complete_record,
    content_run_id,
    environment_identity,
    git_identity,
)
from perfwatch.contract.validation import validate_record

SHA = "0123456789abcdef0123456789abcdef01234567"


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        (
            {"GITHUB_ACTIONS": "true", "GITHUB_SHA": SHA, "GITHUB_REF_NAME": "main"},
            Identity(commit=SHA, branch="main"),
        ),
        (  # a pull request: the source branch, not "42/merge"
            {
                "GITHUB_ACTIONS": "true",
                "GITHUB_SHA": SHA,
                "GITHUB_REF_NAME": "42/merge",
                "GITHUB_HEAD_REF": "feature",
            },
            Identity(commit=SHA, branch="feature"),
        ),
        (
            {"GITLAB_CI": "true", "CI_COMMIT_SHA": SHA, "CI_COMMIT_REF_NAME": "main"},
            Identity(commit=SHA, branch="main"),
        ),
        (
            {
                "GITLAB_CI": "true",
                "CI_COMMIT_SHA": SHA,
                "CI_COMMIT_REF_NAME": "main",
                "CI_MERGE_REQUEST_SOURCE_BRANCH_NAME": "fix",
            },
            Identity(commit=SHA, branch="fix"),
        ),
        (  # a merged results pipeline builds a merge: the merge request's head is the commit
            {
                "GITLAB_CI": "true",
                "CI_COMMIT_SHA": "feedface" * 5,
                "CI_COMMIT_REF_NAME": "refs/merge-requests/7/merge",
                "CI_MERGE_REQUEST_SOURCE_BRANCH_NAME": "fix",
                "CI_MERGE_REQUEST_SOURCE_BRANCH_SHA": SHA,
            },
            Identity(commit=SHA, branch="fix", merge_commit="feedface" * 5),
        ),
        (  # other merge request pipelines leave it empty
            {
                "GITLAB_CI": "true",
                "CI_COMMIT_SHA": SHA,
                "CI_MERGE_REQUEST_SOURCE_BRANCH_NAME": "fix",
                "CI_MERGE_REQUEST_SOURCE_BRANCH_SHA": "",
            },
            Identity(commit=SHA, branch="fix"),
        ),
        (
            {"JENKINS_URL": "http://ci/", "GIT_COMMIT": SHA, "GIT_BRANCH": "origin/release"},
            Identity(commit=SHA, branch="release"),
        ),
        (
            {"BUILDKITE": "true", "BUILDKITE_COMMIT": SHA, "BUILDKITE_BRANCH": "main"},
            Identity(commit=SHA, branch="main"),
        ),
        (  # Buildkite builds triggered without a commit say HEAD
            {"BUILDKITE": "true", "BUILDKITE_COMMIT": "HEAD", "BUILDKITE_BRANCH": "main"},
            Identity(branch="main"),
        ),
        ({"GITHUB_SHA": SHA}, Identity()),  # not inside GitHub Actions
    ],
)
def test_ci_identity(env: dict[str, str], expected: Identity) -> None:
    assert ci_identity(env) == expected


@pytest.mark.parametrize(
    ("ci", "commit", "ref", "tag", "tag_value"),
    [
        ("GITHUB_ACTIONS", "GITHUB_SHA", "GITHUB_REF_NAME", "GITHUB_REF_TYPE", "tag"),
        ("GITLAB_CI", "CI_COMMIT_SHA", "CI_COMMIT_REF_NAME", "CI_COMMIT_TAG", "v1.2.0"),
        ("BUILDKITE", "BUILDKITE_COMMIT", "BUILDKITE_BRANCH", "BUILDKITE_TAG", "v1.2.0"),
        ("JENKINS_URL", "GIT_COMMIT", "BRANCH_NAME", "TAG_NAME", "v1.2.0"),
    ],
)
def test_a_tag_build_has_no_branch(
    ci: str, commit: str, ref: str, tag: str, tag_value: str
) -> None:
    # the ref of a tag build names the tag: not a branch, or each release is a history
    built = {ci: "true", commit: SHA, ref: "v1.2.0"}
    assert ci_identity(built) == Identity(commit=SHA, branch="v1.2.0")  # as far as it knows
    assert ci_identity({**built, tag: tag_value}) == Identity(commit=SHA)


MERGE_SHA = "feedfacefeedfacefeedfacefeedfacefeedface"  # GitHub's merge of the pull request


@pytest.mark.parametrize("event", ["pull_request", "pull_request_target"])
def test_github_pull_request_commit_is_its_head_not_the_merge(event: str, tmp_path: Path) -> None:
    payload = tmp_path / "event.json"
    payload.write_text(f'{{"number": 42, "pull_request": {{"head": {{"sha": "{SHA}"}}}}}}')
    env = {
        "GITHUB_ACTIONS": "true",
        "GITHUB_EVENT_NAME": event,
        "GITHUB_EVENT_PATH": str(payload),
        "GITHUB_SHA": MERGE_SHA,
        "GITHUB_REF_NAME": "42/merge",
        "GITHUB_HEAD_REF": "feature",
    }
    # pull_request builds GitHub's merge of the pull request, _target the base's commit
    merge = MERGE_SHA if event == "pull_request" else None
    assert ci_identity(env) == Identity(commit=SHA, branch="feature", merge_commit=merge)
    # a push builds its own commit; a payload that cannot be read leaves GITHUB_SHA
    assert ci_identity({**env, "GITHUB_EVENT_NAME": "push"}).commit == MERGE_SHA
    missing = {**env, "GITHUB_EVENT_PATH": str(tmp_path / "missing.json")}
    assert ci_identity(missing).commit == MERGE_SHA


def test_a_github_merge_queue_build_belongs_to_the_branch_it_lands_on() -> None:
    queue = {
        "GITHUB_ACTIONS": "true",
        "GITHUB_EVENT_NAME": "merge_group",
        "GITHUB_SHA": MERGE_SHA,  # the queue's commit, which becomes the base branch's
        "GITHUB_REF_NAME": f"gh-readonly-queue/release/2.x/pr-42-{SHA}",
    }
    assert ci_identity(queue) == Identity(commit=MERGE_SHA, branch="release/2.x")
    # the same ref name pushed by hand is a branch like any other
    pushed = {**queue, "GITHUB_EVENT_NAME": "push"}
    assert ci_identity(pushed).branch == f"gh-readonly-queue/release/2.x/pr-42-{SHA}"


def test_a_report_of_the_pull_requests_merge_is_given_its_head(tmp_path: Path) -> None:
    # pytest-benchmark and git name the commit checked out: on a pull request, the merge
    payload = tmp_path / "event.json"
    payload.write_text(f'{{"pull_request": {{"head": {{"sha": "{SHA}"}}}}}}')
    defaults = ci_identity(
        {
            "GITHUB_ACTIONS": "true",
            "GITHUB_EVENT_NAME": "pull_request",
            "GITHUB_EVENT_PATH": str(payload),
            "GITHUB_SHA": MERGE_SHA,
        }
    )
    partial = {"test": "t", "run_id": "r", "timestamp": "2024-05-01T00:00:00Z", "metrics": {}}

    merged = complete_record(
        {**partial, "commit": MERGE_SHA}, explicit=Identity(), defaults=defaults
    )
    other = complete_record({**partial, "commit": "a" * 40}, explicit=Identity(), defaults=defaults)

    assert merged["commit"] == SHA
    assert other["commit"] == "a" * 40  # a commit the report names itself is kept


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "user.email=ci@example.org", "-c", "user.name=CI", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def test_git_identity(tmp_path: Path) -> None:
    assert git_identity(tmp_path) == Identity()  # not a repository
    _git(tmp_path, "init", "-q", "-b", "topic")
    (tmp_path / "f").write_text("x")
    _git(tmp_path, "add", "f")
    _git(tmp_path, "commit", "-qm", "one")
    head = _git(tmp_path, "rev-parse", "HEAD")
    assert git_identity(tmp_path) == Identity(commit=head, branch="topic")
    _git(tmp_path, "checkout", "-q", "--detach")
    assert git_identity(tmp_path) == Identity(commit=head)
    # CI variables win over git
    env = {"GITHUB_ACTIONS": "true", "GITHUB_SHA": SHA, "GITHUB_REF_NAME": "main"}
    assert environment_identity(env, tmp_path) == Identity(commit=SHA, branch="main")
    assert environment_identity({}, tmp_path) == Identity(commit=head)


PARTIAL = {"test": "bench", "metrics": {"m": 1.5}, "timestamp": "2024-05-01T00:00:00Z"}


def test_precedence_flags_over_record_over_defaults() -> None:
    record = complete_record(
        {**PARTIAL, "commit": "from-record", "attributes": {"os": "linux", "cpu": "x86"}},
        explicit=Identity(branch="from-flag", attributes={"os": "mac"}),
        defaults=Identity(commit="from-ci", branch="from-ci", run_id="ignored-too"),
    )
    assert record["commit"] == "from-record"
    assert record["branch"] == "from-flag"
    assert record["attributes"] == {"os": "mac", "cpu": "x86"}
    assert list(record) == [
        "schema",
        "test",
        "run_id",
        "commit",
        "branch",
        "timestamp",
        "attributes",
        "metrics",
    ]
    assert validate_record(record) == []


def test_run_id_from_content_is_stable_and_content_bound() -> None:
    def run_id(partial: dict, **kwargs: object) -> str:
        return complete_record(partial, explicit=Identity(), defaults=Identity(), **kwargs)[
            "run_id"
        ]

    first = run_id(PARTIAL)
    assert first == run_id(dict(reversed(list(PARTIAL.items()))))  # key order is not content
    assert first != run_id({**PARTIAL, "metrics": {"m": 1.6}})
    assert first != run_id({**PARTIAL, "commit": "abc"})
    assert first.startswith("sha256-") and len(first) == len("sha256-") + 32
    # a time from outside the content (a file's mtime) does not change the id
    untimed = {key: value for key, value in PARTIAL.items() if key != "timestamp"}
    assert run_id(untimed, fallback_timestamp="2020-01-01T00:00:00Z") == run_id(
        untimed, fallback_timestamp="2021-01-01T00:00:00Z"
    )
    assert content_run_id({**PARTIAL, "run_id": "x"}) == content_run_id(PARTIAL)


def test_given_run_id_is_kept_and_flag_replaces_it() -> None:
    keep = complete_record({**PARTIAL, "run_id": "own"}, explicit=Identity(), defaults=Identity())
    assert keep["run_id"] == "own"
    replaced = complete_record(
        {**PARTIAL, "run_id": "own"}, explicit=Identity(run_id="flag"), defaults=Identity()
    )
    assert replaced["run_id"] == "flag"


def test_test_prefix_and_fallback_timestamp() -> None:
    record = complete_record(
        {"test": "BM_Sort/64", "metrics": {"real_time": 3.0}},
        explicit=Identity(),
        defaults=Identity(),
        test_prefix="nightly",
        fallback_timestamp="2024-05-01T10:00:00Z",
    )
    assert record["test"] == "nightly/BM_Sort/64"
    assert record["timestamp"] == "2024-05-01T10:00:00Z"


def test_malformed_identity_is_left_for_validation() -> None:
    record = complete_record(
        {**PARTIAL, "attributes": ["os=linux"]},
        explicit=Identity(attributes={"ci": "yes"}),
        defaults=Identity(),
    )
    problems = validate_record(record)
    assert [problem.path for problem in problems] == ["$.attributes"]
