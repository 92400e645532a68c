"""`ferry lease`: one pass at a time on a migration whose carried state is in Blob storage, where
passes started on different machines cannot see each other's run directory lock (issue 42, 4)."""

from __future__ import annotations

import json
import uuid


def lease(run_ferry, state, action, id_, holder="", check=0):
    out = run_ferry("lease", state, action, "--id", id_, "--holder", holder, check=check)
    return json.loads(out.stdout)


def test_a_lease_on_the_state_keeps_a_second_taker_out_and_names_the_first(container, run_ferry):
    state = container.at("ferry/state")
    first, second = str(uuid.uuid4()), str(uuid.uuid4())
    took = lease(run_ferry, state, "acquire", first, holder='{"pass": "final", "host": "a"}')
    assert (took["held"], took["holder"], took["seconds"]) == (True, None, 60)
    # The lock blob, under the state's prefix, names the holder.
    assert container.client.download_blob("ferry/state/lock").readall() == (
        b'{"pass": "final", "host": "a"}'
    )
    refused = lease(run_ferry, state, "acquire", second, holder="other", check=3)
    assert refused["held"] is False
    assert json.loads(refused["holder"]) == {"pass": "final", "host": "a"}
    # Taking it again under the same id renews it; renewing under another is refused.
    assert lease(run_ferry, state, "acquire", first, holder="again")["held"] is True
    assert lease(run_ferry, state, "renew", first)["held"] is True
    assert lease(run_ferry, state, "renew", second, check=3)["held"] is False
    assert lease(run_ferry, state, "release", first)["held"] is True
    assert lease(run_ferry, state, "acquire", second, holder="second")["held"] is True
    assert lease(run_ferry, state, "release", first, check=3)["held"] is False


def test_a_lease_is_for_a_blob_state_only(tmp_path, run_ferry):
    out = run_ferry("lease", tmp_path / "state", "acquire", "--id", str(uuid.uuid4()), check=2)
    assert "not in Blob storage" in out.stderr and "run directory's lock" in out.stderr
