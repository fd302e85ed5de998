"""examples/the_scoop/access-tour.sh keeps showing the seed's outcome."""

import os
import subprocess
import sys
from pathlib import Path

TOUR = Path(__file__).parent.parent / "examples" / "the_scoop" / "access-tour.sh"


def test_access_tour_shows_each_correspondent_their_own_tools():
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROTEGE_")}
    env["PROTEGE"] = str(Path(sys.executable).parent / "protege")
    result = subprocess.run(
        ["bash", str(TOUR)], env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    jane = out.split("$ protege access explain Sundae --sender jane@acme.com")[1]
    assert (
        jane.split("\n$ ")[0]
        .rstrip()
        .endswith(
            "tools: check_flavor_stock, create_file, lookup_order, read_attachment, "
            "search_emails, send_email, web_fetch, web_search"
        )
    )
    mara = out.split("$ protege access explain Sundae --sender Mara")[1]
    assert "routing key: mara@thescoop.com" in mara
    assert "lookup_order, process_refund, read_attachment, search_emails" in mara
    scheduled = out.split("$ protege access explain Sundae --scheduled")[1]
    assert "tools: none" in scheduled
