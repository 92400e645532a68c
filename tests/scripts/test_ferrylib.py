"""workflow/scripts/ferrylib.py, the helpers of the pipelines' scripts: locations made fit for logs, the default run name, the
worker's JSON documents, and the migration config's cross-field checks. No worker, no engine."""

from __future__ import annotations

import copy
import json

import ferrylib
import pytest
from ferrylib import ConfigError, check_config, identity, redact, run_name_for

# ---------------------------------------------------------------------------------------------
# locations and names


@pytest.mark.parametrize(
    "location,shown",
    [
        ("/data/project", "/data/project"),
        ("az://acct/ctr/prefix", "az://acct/ctr/prefix"),
        (
            "https://acct.blob.core.windows.net/ctr/p?sv=2022-11-02&sig=c2VjcmV0",
            "https://acct.blob.core.windows.net/ctr/p",
        ),
        (
            "https://user:pa55@acct.blob.core.windows.net/ctr",
            "https://acct.blob.core.windows.net/ctr",
        ),
        (
            "http://token@127.0.0.1:10000/devstoreaccount1/ctr?se=x&sig=y",
            "http://127.0.0.1:10000/devstoreaccount1/ctr",
        ),
        ("/data/odd?name", "/data/odd"),
    ],
)
def test_redact_drops_query_and_credentials(location, shown):
    assert redact(location) == shown


def test_redact_keeps_an_at_sign_in_the_path():
    assert (
        redact("https://acct.blob.core.windows.net/ctr/user@example")
        == "https://acct.blob.core.windows.net/ctr/user@example"
    )


def test_run_name_is_stable_readable_and_tells_migrations_apart():
    name = run_name_for("/data/project", "az://acct/ctr")
    assert name == run_name_for("/data/project", "az://acct/ctr")
    assert name.startswith("project-") and len(name) == len("project-") + 8
    assert run_name_for("/data/project/", "az://acct/ctr").startswith("project-")
    assert run_name_for("/data/project", "az://acct/other") != name
    assert run_name_for("/other/project", "az://acct/ctr") != name


@pytest.mark.parametrize(
    "source,stem",
    [
        ("/", "root"),
        ("", "root"),
        ("/data/my project (2024)", "my_project_2024"),
        ("/data/.hidden", "hidden"),
        ("/data/..", "root"),
        ("/data/./x/../.hidden/", "hidden"),
        ("/data/ünï", "n"),
        ("/data/é", "src"),
        ("az://acct/ctr", "ctr"),
        ("/data/" + "x" * 60, "x" * 40),
    ],
)
def test_run_name_stem_is_a_safe_name(source, stem):
    name = run_name_for(source, "/dst")
    assert name.rsplit("-", 1)[0] == stem
    assert all(c.isalnum() or c in "._-" for c in name)


# ---------------------------------------------------------------------------------------------
# the worker's JSON documents


def test_load_json_reads_only_whole_objects(tmp_path):
    path = tmp_path / "doc.json"
    assert ferrylib.load_json(str(path)) is None
    for text in ("", "  \n", '{"files": {"cop', "[1, 2]", "null"):
        path.write_text(text)
        assert ferrylib.load_json(str(path)) is None, text
    ferrylib.write_json(str(path), {"files": {"copied": 3}, "name": "ünï"})
    assert ferrylib.load_json(str(path)) == {"files": {"copied": 3}, "name": "ünï"}
    assert json.loads(path.read_text()) == {"files": {"copied": 3}, "name": "ünï"}
    assert [p.name for p in tmp_path.iterdir()] == ["doc.json"], "write_json left its temp file"


# ---------------------------------------------------------------------------------------------
# the migration config's cross-field checks


def config(tmp_path, **changes) -> dict:
    """A migration config as the pipeline hands it to check_config (defaults applied), local
    source and blob destination, with ``changes`` as {"block.key": value} or {"key": value}."""
    cfg = {
        "source": str(tmp_path / "src"),
        "dest": "https://acct.blob.core.windows.net/ctr?sv=1&sig=SECRETSIG",
        "outdir": str(tmp_path / "results"),
        "plan": {"tool": "ferry", "mode": "parts", "parts": 4, "max_files": 0, "max_bytes": "0"},
        "copy": {"block_size": "8MiB"},
    }
    cfg = copy.deepcopy(cfg)
    for key, value in changes.items():
        *block, field = key.split(".")
        (cfg[block[0]] if block else cfg)[field] = value
    return cfg


def config_error(cfg) -> str:
    with pytest.raises(ConfigError) as err:
        check_config(cfg)
    return str(err.value)


def test_a_sound_config_passes(tmp_path):
    check_config(config(tmp_path))
    check_config(config(tmp_path, **{"plan.max_bytes": "64GiB", "copy.block_size": 4 << 20}))
    # outdir beside the source, or under a blob destination's name: not inside anything migrated.
    check_config(config(tmp_path, outdir=str(tmp_path / "src-results")))
    check_config(config(tmp_path, source="az://acct/a", dest="az://acct/b", outdir=str(tmp_path)))


@pytest.mark.parametrize("missing", ["source", "dest"])
def test_source_and_dest_are_required(tmp_path, missing):
    message = config_error(config(tmp_path, **{missing: ""}))
    assert "'source' and 'dest' are required" in message and "replicate.source" in message


def test_fpart_with_a_blob_source_is_refused_without_showing_the_sas(tmp_path):
    cfg = config(tmp_path, **{"plan.tool": "fpart"})
    check_config(cfg)  # a local source: fpart is fine
    cfg["source"], cfg["dest"] = cfg["dest"], str(tmp_path / "dst")
    message = config_error(cfg)
    assert message.startswith("config field 'plan.tool': fpart partitions local sources only")
    assert "https://acct.blob.core.windows.net/ctr" in message and "SECRETSIG" not in message


@pytest.mark.parametrize("dest_suffix", ["", "/"])
def test_source_and_dest_the_same_place(tmp_path, dest_suffix):
    message = config_error(config(tmp_path, dest=str(tmp_path / "src") + dest_suffix))
    assert message == "config fields 'source' and 'dest' name the same location"


@pytest.mark.parametrize("side", ["source", "dest"])
@pytest.mark.parametrize("where", ["inside", "equal"])
def test_outdir_inside_a_local_side_is_refused(tmp_path, side, where):
    local = tmp_path / side
    cfg = config(
        tmp_path, **{side: str(local), ("dest" if side == "source" else "source"): "az://acct/ctr"}
    )
    cfg["outdir"] = str(local / "results") if where == "inside" else str(local) + "/"
    message = config_error(cfg)
    assert message.startswith(
        f"config field 'outdir': {cfg['outdir']!r} lies inside {side} {str(local)!r}"
    )


def test_outdir_inside_the_source_through_a_symlink_is_refused(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "src")
    message = config_error(config(tmp_path, outdir=str(tmp_path / "link" / "results")))
    assert "lies inside source" in message


def test_one_migration_whatever_its_spelling(tmp_path, monkeypatch):
    """Issue 42: a trailing slash, a relative path, `.` and `..`, a symlink, `az://` against its
    https URL, or a new SAS continue the migration (its run name); another end does not."""
    share = tmp_path / "data" / "share"
    share.mkdir(parents=True)
    (tmp_path / "link").symlink_to(share)
    monkeypatch.chdir(tmp_path)
    env = {"AZURE_STORAGE_ACCOUNT": "acct"}
    dest = "az://archive/share"
    name = run_name_for(str(share), dest, env)
    for source in (f"{share}/", "data/share", "./data/./x/../share/", "link", f"{tmp_path}/link/"):
        assert run_name_for(source, dest, env) == name, source
    for spelt in (
        "az://archive/share/",
        "https://acct.blob.core.windows.net/archive/share",
        "https://ACCT.blob.core.windows.net:443/archive//share/?sv=2024&sig=secret",
        "az://archive/share?sig=rotated",
    ):
        assert run_name_for(str(share), spelt, env) == name, spelt
    assert identity("az://archive/share?sig=secret", env) == (
        "https://acct.blob.core.windows.net/archive/share"
    )
    emulator = {**env, "AZURE_STORAGE_BLOB_ENDPOINT": "http://127.0.0.1:10000/acct/"}
    assert identity("az://archive/share", emulator) == "http://127.0.0.1:10000/acct/archive/share"
    assert run_name_for(str(share), "az://archive/other", env) != name
    assert (
        run_name_for(str(share), "https://other.blob.core.windows.net/archive/share", env) != name
    )
