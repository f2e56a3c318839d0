"""cluster.yaml (the `ray up` config) is valid for Ray's own validator and carries what raygroups needs.

Pure and offline: Ray's validator (`prepare_config` + `validate_config`, private API, hence the pinned Ray
version) checks the schema; it does not look inside the `ray start` strings, so the roles, health checks,
metrics port and token authentication are checked here by parsing those commands as a shell would.
"""

from __future__ import annotations

import copy
import json
import re
import shlex
import tomllib
from pathlib import Path

import jsonschema
import pytest
import yaml
from ray._private.label_utils import parse_node_labels_string, validate_node_labels
from ray.autoscaler._private.util import prepare_config, validate_config

ROOT = Path(__file__).resolve().parents[2]
CLUSTER_YAML = ROOT / "cluster.yaml"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())

COORDINATOR_LABEL = ("raygroups.io/role", "coordinator")
HEALTH_CHECKS = {
    "RAY_health_check_initial_delay_ms": "1000",
    "RAY_health_check_period_ms": "200",
    "RAY_health_check_failure_threshold": "3",
    "RAY_health_check_timeout_ms": "1000",
}
METRICS_PORT = "8080"


def load() -> dict:
    return yaml.safe_load(CLUSTER_YAML.read_text())


@pytest.fixture(scope="module")
def raw() -> dict:
    return load()


@pytest.fixture(scope="module")
def prepared(raw) -> dict:
    return prepare_config(copy.deepcopy(raw))


def ray_start(commands: list[str]) -> tuple[dict[str, str], dict[str, str], list[str]]:
    """The one `ray start` of a start-command list: (env assignments before it, --opt=value options, flags)."""
    found = []
    for command in commands:
        for part in command.split(";"):
            words = shlex.split(part)
            env = {}
            while words and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", words[0]):
                key, value = words.pop(0).split("=", 1)
                env[key] = value
            if len(words) >= 2 and Path(words[0]).name == "ray" and words[1] == "start":
                options, flags = {}, []
                for word in words[2:]:
                    assert word.startswith("--"), f"unexpected argument {word!r} in {part!r}"
                    if "=" in word:
                        key, value = word.split("=", 1)
                        assert key not in options, f"{key} given twice"
                        options[key] = value
                    else:
                        flags.append(word)
                found.append((env, options, flags))
    assert len(found) == 1, f"expected exactly one `ray start` in {commands}"
    return found[0]


# --- Ray's own validation -------------------------------------------------------------------------------------


def test_ray_validator_accepts_it(prepared):
    validate_config(prepared)


def test_local_provider_with_placeholder_host_names(raw, prepared):
    provider = raw["provider"]
    assert provider["type"] == "local"
    # Ray's own convention: host names that resolve nowhere, never addresses that may be live on a user's
    # network (RFC 5737's 192.0.2.x is some machines' own segment); deploy/ray_up_e2e.py substitutes them.
    assert provider["head_ip"] == "HEAD_NODE_HOSTNAME"
    assert provider["worker_ips"] == [f"WORKER_NODE_HOSTNAME_{i}" for i in (1, 2, 3)]
    addresses = set(re.findall(r"\b\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}\b", CLUSTER_YAML.read_text()))
    # (0.0.0.0 is the Kafka listeners' wildcard, every interface of a node: no machine's address.)
    assert addresses <= {"127.0.0.1", "0.0.0.0"}, addresses
    assert len(set(provider["worker_ips"]) | {provider["head_ip"]}) == len(provider["worker_ips"]) + 1
    assert "REPLACE" in CLUSTER_YAML.read_text()
    assert raw["auth"]["ssh_user"]
    # Every listed machine joins: min and max workers come out as the number of worker IPs.
    (node_type,) = prepared["available_node_types"].values()
    assert node_type["min_workers"] == node_type["max_workers"] == len(provider["worker_ips"])


def test_typo_in_a_key_is_rejected(raw):
    broken = copy.deepcopy(raw)
    broken["upscaling_sped"] = broken.pop("upscaling_speed")
    with pytest.raises(jsonschema.ValidationError, match="upscaling_sped"):
        validate_config(prepare_config(broken))


def test_commented_aws_alternative_is_valid_too(raw):
    text = CLUSTER_YAML.read_text()
    block = re.search(r"^# --- AWS alternative \(begin\).*?\n(.*?)^# --- AWS alternative \(end\)", text, re.S | re.M)
    assert block, "the commented AWS alternative is missing"
    lines = block.group(1).splitlines()
    assert all(line.startswith("# ") for line in lines), "only commented-out YAML between the markers"
    aws = yaml.safe_load("\n".join(line[2:] for line in lines))
    assert aws["provider"]["type"] == "aws"
    config = {k: v for k, v in copy.deepcopy(raw).items() if k not in ("provider", "auth")}
    config.update(aws)
    # Local paths of file_mounts are not read by the validator; nothing here needs AWS credentials.
    validate_config(prepare_config(config))
    types = aws["available_node_types"]
    head = types[aws["head_node_type"]]
    assert head["resources"] == {"CPU": 0, "head": 1}
    workers = [t for name, t in types.items() if name != aws["head_node_type"]]
    assert workers and all(t["resources"] == {"coordinator": 1} for t in workers)
    assert all(t["labels"] == dict([COORDINATOR_LABEL]) for t in workers)


# --- the raygroups-specific parts -----------------------------------------------------------------------------


def test_head_runs_no_shard_and_no_tasks(raw):
    env, options, flags = ray_start(raw["head_start_ray_commands"])
    assert "--head" in flags
    assert options["--num-cpus"] == "0"
    assert json.loads(options["--resources"]) == {"head": 1}
    assert "coordinator" not in options["--resources"]
    assert "--labels" not in options and "--labels-file" not in options
    # The local provider's autoscaler needs its bootstrap config to start the workers.
    assert options["--autoscaling-config"] == "~/ray_bootstrap_config.yaml"


NAME_FILE = "~/raygroups-data/node-name"


def test_workers_are_coordinator_nodes_with_stable_names(raw):
    env, options, flags = ray_start(raw["worker_start_ray_commands"])
    head_port = ray_start(raw["head_start_ray_commands"])[1]["--port"]
    assert options["--address"] == f"$RAY_HEAD_IP:{head_port}"
    assert json.loads(options["--resources"]) == {"coordinator": 1}
    # The node's name comes from a file in its data directory, written once from the host name.
    substitution = f"$(cat {NAME_FILE})"
    assert substitution in options["--labels"]
    labels = parse_node_labels_string(options["--labels"].replace(substitution, "coord-host-1"))
    validate_node_labels(labels)  # not in Ray's reserved ray.io/ prefix, and a valid value
    from raygroups.placement.nodes import COORDINATOR_RESOURCE, NODE_LABEL, validate_node_name

    assert labels == {**dict([COORDINATOR_LABEL]), NODE_LABEL: "coord-host-1"}
    (name_command,) = [c for c in raw["worker_start_ray_commands"] if NAME_FILE in c and "ray start" not in c]
    assert f"test -s {NAME_FILE} || hostname -s > {NAME_FILE}" in name_command  # kept, never rewritten
    assert raw["worker_start_ray_commands"].index(name_command) < len(raw["worker_start_ray_commands"]) - 1
    validate_node_name("coord-host-1")
    # The resource name is the one the controller recognises coordinator nodes by.
    assert COORDINATOR_RESOURCE in json.loads(options["--resources"])


def test_head_start_ends_with_the_deploy(raw):
    *_, last = raw["head_start_ray_commands"]
    words = shlex.split(last)
    env = {}
    while re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", words[0]):
        key, value = words.pop(0).split("=", 1)
        env[key] = value
    assert env.get("RAY_AUTH_MODE") == "token"
    assert words[:2] == ["~/raygroups-venv/bin/raygroups", "deploy"]
    from raygroups.cli import deploy

    params = deploy.make_context("deploy", words[2:]).params  # the command line the CLI really accepts
    assert params["wait"] is False  # the workers join after the head: partitions come up as they do
    assert params["address"] == "auto" and params["namespace"] == "raygroups"
    # The data directory is the one whose node-name file the workers keep (the same $HOME path).
    assert params["data_dir"] == "$HOME/raygroups-data" and NAME_FILE.startswith("~/raygroups-data/")


@pytest.mark.parametrize("commands", ["head_start_ray_commands", "worker_start_ray_commands"])
def test_every_node_exports_metrics_and_requires_a_token(raw, commands):
    env, options, _ = ray_start(raw[commands])
    assert options["--metrics-export-port"] == METRICS_PORT
    assert env.get("RAY_AUTH_MODE") == "token"
    # Both start commands stop a previous Ray first, so that `ray up` re-runs apply the new settings.
    assert raw[commands][0] == "~/raygroups-venv/bin/ray stop"


def test_head_has_the_tuned_health_checks(raw):
    env, _, _ = ray_start(raw["head_start_ray_commands"])
    for key, value in HEALTH_CHECKS.items():
        assert env.get(key) == value, key
    period, threshold = int(env["RAY_health_check_period_ms"]), int(env["RAY_health_check_failure_threshold"])
    timeout = int(env["RAY_health_check_timeout_ms"])
    assert period * threshold <= 600  # a crashed node (its checks refused at once) is dead within 0.6 s
    assert (period + timeout) * threshold >= 3000  # a node silent for less than 3 s is not declared dead
    assert "44680" in CLUSTER_YAML.read_text()  # the false-positive trade-off is documented


@pytest.mark.parametrize("commands", ["head_start_ray_commands", "worker_start_ray_commands"])
def test_every_nodes_workers_follow_their_raylets_death_at_once(raw, commands):
    env, _, _ = ray_start(raw[commands])
    assert env.get("RAY_raylet_death_check_interval_milliseconds") == "100"


def test_token_is_distributed_not_committed(raw):
    mounts = raw["file_mounts"]
    assert mounts.get("~/.ray/auth_token") == "~/.ray/auth_token"
    text = CLUSTER_YAML.read_text()
    assert "ray get-auth-token" in text
    assert "RAY_AUTH_TOKEN=" not in text
    # Ray's tokens are long hex/uuid-like strings; nothing of the kind may appear in the file.
    assert not re.search(r"\b[0-9a-fA-F]{32,}\b", text)
    assert not re.search(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", text)
    assert not re.search(r"(?i)(password|secret|aws_access_key_id|aws_secret_access_key)\s*[:=]", text)
    assert "PRIVATE KEY-----" not in text


def test_no_paths_of_a_particular_machine(raw):
    text = CLUSTER_YAML.read_text()
    assert not re.search(r"(/home/|/Users/|/root/|/work/|/tmp/)", text)
    for remote, local in raw["file_mounts"].items():
        assert remote.startswith("~/")
        assert local.startswith("~/") or not local.startswith("/")


def test_setup_installs_exactly_the_tested_versions(raw):
    """Every node installs the wheel's dependencies through its constraints.txt, which pins every run-time
    dependency (pyproject's included, ray at 2.60.0) at the version this environment runs."""
    from packaging.requirements import Requirement

    from raygroups.deployment.versions import canonical, shipped_constraints

    setup = "\n".join(raw["setup_commands"])
    assert "-m zipfile -e ~/raygroups-dist/raygroups-" in setup
    assert "pip install -q -c ~/raygroups-wheel/raygroups/constraints.txt ~/raygroups-dist/raygroups-" in setup
    pins = shipped_constraints()
    for requirement in map(Requirement, PYPROJECT["project"]["dependencies"]):
        assert requirement.specifier.contains(pins[canonical(requirement.name)]), requirement
    import ray

    assert pins["ray"] == "2.60.0" == ray.__version__  # the validator used above is the cluster's own
    # The project wheel is the exact version of pyproject.toml, both where it is copied and where installed.
    wheel = f"raygroups-{PYPROJECT['project']['version']}-py3-none-any.whl"
    assert raw["file_mounts"]["~/raygroups-dist"] == "dist"  # a directory: Ray warns about single files
    assert f"--no-deps --force-reinstall ~/raygroups-dist/{wheel}" in setup
    # The venv the setup creates is the one whose `ray` starts the nodes.
    assert "-m venv ~/raygroups-venv" in setup
    for commands in ("head_start_ray_commands", "worker_start_ray_commands"):
        programs = [w for c in raw[commands] for w in shlex.split(c.replace(";", " "))
                    if Path(w).name in ("ray", "raygroups")]
        assert programs and all(w.startswith("~/raygroups-venv/bin/") for w in programs), programs


def test_python_version_matches_pyproject(raw):
    setup = "\n".join(raw["setup_commands"])
    minimum = PYPROJECT["project"]["requires-python"].removeprefix(">=")
    assert f"python{minimum} -m venv" in setup


def test_head_announces_its_own_address_and_nodes_speak_token_auth(raw):
    # Without a default route Ray guesses 127.0.0.1 for the head and no worker joins.
    _, options, _ = ray_start(raw["head_start_ray_commands"])
    assert options["--node-ip-address"] == "$(hostname -I | cut -d' ' -f1)"
    setup = "\n".join(raw["setup_commands"])
    # `ray stop` (what `ray down` runs), the `ray` CLI and drivers on the nodes use the venv and the token.
    assert "echo 'source ~/raygroups-venv/bin/activate' >> ~/.bashrc" in setup
    assert "echo 'export RAY_AUTH_MODE=token' >> ~/.bashrc" in setup


def test_the_gcs_is_kept_on_the_heads_disk_and_every_raylet_waits_for_it(raw):
    """GCS fault tolerance: the head's GCS in RocksDB on its disk, every node's raylet waiting 300 s for a GCS
    that went away; a `ray up` wipes that storage before the head starts (a new Ray cluster), so the
    command an operator runs after a power cut is the `ray start --head` line alone."""
    env, _, _ = ray_start(raw["head_start_ray_commands"])
    assert env.get("RAY_gcs_storage") == "rocksdb"
    assert env.get("RAY_gcs_storage_path") == "$HOME/raygroups-gcs"
    for commands in ("head_start_ray_commands", "worker_start_ray_commands"):
        assert ray_start(raw[commands])[0].get("RAY_gcs_rpc_server_reconnect_timeout_s") == "300", commands
    head = raw["head_start_ray_commands"]
    wipe = head.index("rm -rf ~/raygroups-gcs")
    assert wipe < next(i for i, c in enumerate(head) if "ray start --head" in c)


def test_no_unlimited_core_dumps_and_no_install_from_a_stale_package_list(raw):
    """A crashing process must not fill the disk that holds the offsets logs with a core dump; an
    ``apt-get install`` runs after ``apt-get update`` in the same command (a new image's lists are empty)."""
    text = CLUSTER_YAML.read_text()
    assert "ulimit -c unlimited" not in text
    commands = [c for key in ("setup_commands", "head_setup_commands", "worker_setup_commands",
                              "head_start_ray_commands", "worker_start_ray_commands") for c in raw.get(key) or []]
    installs = [c for c in commands if "apt-get install" in c]
    assert installs and all(c.index("apt-get update") < c.index("apt-get install") for c in installs if "apt-get update" in c)
    assert all("apt-get update" in c for c in installs)


@pytest.mark.parametrize("commands", ["head_start_ray_commands", "worker_start_ray_commands"])
def test_every_node_exports_counters_once(raw, commands):
    env, _, _ = ray_start(raw[commands])
    assert env.get("RAY_EXPORT_COUNTER_AS_GAUGE") == "0"


def test_constraints_and_freeze_parsing_and_the_nodes_check():
    from raygroups.deployment.versions import mismatches, parse_constraints, parse_freeze

    assert parse_constraints("# pins\nRay==2.60.0\n\nmsgpack==1.1.0  # codec\n") == {"ray": "2.60.0",
                                                                                  "msgpack": "1.1.0"}
    for bad, message in (("ray>=2\n", "line 1: 'ray>=2' is not NAME==VERSION"),
                         ("ray==2\nRay==3\n", "line 2: Ray is pinned twice"), ("==1\n", "is not NAME==VERSION")):
        with pytest.raises(ValueError, match=re.escape(message)):
            parse_constraints(bad)
    installed = parse_freeze("Ray==2.60.0\n-e git+https://x#egg=raygroups\nmsgpack==1.0.8\n")
    assert installed == {"ray": "2.60.0", "msgpack": "1.0.8"}
    assert mismatches({"ray": "2.60.0", "msgpack": "1.1.0", "kio": "0.6.5"}, installed) == [
        "kio: not installed, not 0.6.5", "msgpack: 1.0.8, not 1.1.0"]


def test_every_ray_process_speaks_tls_with_the_certificate_ray_tls_sh_makes(raw, tmp_path):
    """Ray's TLS: every start command (and raygroups deploy) sets the four variables to the mounted
    certificate, and scripts/ray_tls.sh makes one the CA verifies, naming every address it was given."""
    import shutil
    import subprocess

    assert raw["file_mounts"]["~/raygroups-tls"] == "~/.ray/raygroups-tls/cluster"
    started = [c for key in ("head_start_ray_commands", "worker_start_ray_commands") for c in raw[key]
               if "ray start" in c or "raygroups deploy" in c]
    assert len(started) == 3
    for command in started:
        for var in ("RAY_USE_TLS=1", "RAY_TLS_SERVER_CERT=$HOME/raygroups-tls/node.crt",
                    "RAY_TLS_SERVER_KEY=$HOME/raygroups-tls/node.key", "RAY_TLS_CA_CERT=$HOME/raygroups-tls/ca.crt"):
            assert var in command, (var, command[:80])
    if shutil.which("openssl") is None:
        pytest.skip("no openssl")
    script = Path(__file__).resolve().parents[2] / "scripts" / "ray_tls.sh"
    env = {"PATH": "/usr/bin:/bin", "RAYGROUPS_TLS_DIR": str(tmp_path)}
    assert subprocess.run(["sh", str(script)], env=env, capture_output=True).returncode == 2  # usage
    subprocess.run(["sh", str(script), "198.18.0.10", "198.18.0.11", "node-a"], env=env, check=True,
                   capture_output=True)
    cluster = tmp_path / "cluster"
    assert sorted(p.name for p in cluster.iterdir()) == ["ca.crt", "node.crt", "node.key"]  # no CA key
    verified = subprocess.run(["openssl", "verify", "-CAfile", str(cluster / "ca.crt"), str(cluster / "node.crt")],
                              capture_output=True, text=True)
    assert verified.returncode == 0, verified.stderr
    names = subprocess.run(["openssl", "x509", "-in", str(cluster / "node.crt"), "-noout", "-ext", "subjectAltName"],
                           capture_output=True, text=True, check=True).stdout
    assert all(n in names for n in ("IP Address:198.18.0.10", "IP Address:198.18.0.11", "DNS:node-a",
                                    "IP Address:127.0.0.1"))
