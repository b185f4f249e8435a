"""``prefctl profiles import`` reads its input as a stream against a real emulator: from a pipe,
from a large file, and with a bad record anywhere refused before anything is staged."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

from prefctl.emulator.serve import RunningEmulator


def _records(marker: str, count: int) -> list[dict[str, Any]]:
    return [{"AlternateIds": [{"Type": "Stream", "Value": f"{marker}-{n}"}]} for n in range(count)]


def _found(cli, marker: str, n: int) -> list[Any]:
    result = cli("-o", "json", "profiles", "search", "--alternate-id-type", "Stream",
                 "--alternate-id", f"{marker}-{n}")  # fmt: skip
    assert result.exit_code == 0, result.output
    found: list[Any] = result.json
    return found


def test_profiles_import_ndjson_piped_on_stdin_is_imported(emulator: RunningEmulator, cli) -> None:
    marker = uuid.uuid4().hex
    ndjson = "".join(json.dumps(record) + "\n" for record in _records(marker, 1_200))

    # A real pipe, as `zcat customers.ndjson.gz | prefctl profiles import -`: it cannot be read
    # twice, so it is spooled to a temporary file.
    process = subprocess.run(
        [sys.executable, "-m", "prefctl", "-o", "json", "profiles", "import", "-"],
        input=ndjson,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    assert process.returncode == 0, process.stderr
    job = json.loads(process.stdout)
    assert (job["State"], job["TotalRecords"], job["CreatedProfiles"]) == ("Completed", 1200, 1200)
    assert len(_found(cli, marker, 1_199)) == 1


def test_profiles_import_of_a_large_json_array_stages_every_record(
    emulator: RunningEmulator, cli, tmp_path: Path
) -> None:
    marker = uuid.uuid4().hex
    path = tmp_path / "customers.json"
    path.write_text(json.dumps(_records(marker, 3_000), indent=1))

    result = cli("-o", "json", "profiles", "import", str(path), "--chunk-size", "700")

    assert result.exit_code == 0, result.output
    assert (result.json["TotalRecords"], result.json["CreatedProfiles"]) == (3000, 3000)
    assert len(_found(cli, marker, 2_999)) == 1


def test_profiles_import_with_a_bad_last_record_exits_2_before_staging_any(
    emulator: RunningEmulator, cli, tmp_path: Path
) -> None:
    marker = uuid.uuid4().hex
    path = tmp_path / "customers.ndjson"
    lines = [json.dumps(record) for record in _records(marker, 2_000)] + ["[1]"]
    path.write_text("\n".join(lines) + "\n")

    result = cli("profiles", "import", str(path))

    assert result.exit_code == 2, result.output
    assert result.stderr.strip().splitlines() == [
        f"error: {path}: record 2001 is not a JSON object (a profile)"
    ]
    assert _found(cli, marker, 0) == []  # nothing was sent


def test_profiles_import_reports_broken_json_before_an_earlier_bad_record(
    emulator: RunningEmulator, cli
) -> None:
    result = cli("profiles", "import", "-", stdin='[{"Tags": ["ok"]}, 3, {"Tags": ')

    assert result.exit_code == 2, result.output
    assert result.stderr == (
        "error: stdin is not a valid JSON array: Expecting value: line 1 column 31 (char 30)\n"
    )


def test_profiles_import_of_a_missing_file_exits_2(emulator: RunningEmulator, cli) -> None:
    result = cli("profiles", "import", "no-such-file.ndjson")

    assert result.exit_code == 2
    assert "no-such-file.ndjson does not exist" in result.stderr
