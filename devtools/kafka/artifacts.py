"""Kafka's jars, the JMX exporter agent and the portal's broker plugins, fetched and built by Maven once."""


from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from devtools.kafka.base import (
    AGENT_DIR,
    BUDGET_LUA,
    JMX_AGENT_JAR,
    KAFKA_DIR,
    KAFKA_VERSION,
    LIB_DIR,
    PLUGIN_BUILD_DIR,
    PLUGIN_DIR,
    PLUGIN_JAR,
    PLUGIN_MODULES,
    PLUGIN_STAMP,
    PLUGIN_STATS_CLASS,
    PLUGINS_POM,
    POM,
    QUOTA_CALLBACK_JAR,
    TOOL_JVM_OPTS,
    KafkaError,
    _file_lock,
    _log,
    _sha256,
    _tail,
)
from devtools.kafka.probes import java_executable


def jars_ready(pom: Path = POM, lib_dir: Path = LIB_DIR) -> bool:
    """True when ``lib_dir`` holds the jars of this very pom (its sha256 stamp matches)."""
    stamp = lib_dir.parent / f"{lib_dir.name}.sha256"
    return (
        stamp.is_file()
        and stamp.read_text().strip() == _sha256(pom)
        and any(lib_dir.glob("kafka_2.13-*.jar"))
    )


def ensure_kafka_jars(pom: Path = POM, lib_dir: Path = LIB_DIR, agent_dir: Path = AGENT_DIR) -> Path:
    """Bring Kafka's runtime jars into ``lib_dir`` with Maven, unless they are there for this pom already.

    Runs no Maven at all when the stamp matches, so later runs work offline. The copy goes to a temporary
    folder that replaces ``lib_dir`` only when complete, so an interrupted fetch never leaves half a classpath.
    The JMX exporter agent goes to ``agent_dir``; failing to get it is only a warning (the brokers then run
    without it; :func:`ensure_jmx_agent` tries again).
    """
    if jars_ready(pom, lib_dir):
        return lib_dir
    with _file_lock(lib_dir.parent / ".fetch.lock"):
        if jars_ready(pom, lib_dir):  # another process fetched them while we waited for the lock
            return lib_dir
        mvn = shutil.which("mvn")
        if mvn is None:
            raise KafkaError("Maven (mvn) is not installed: run `bash scripts/bootstrap.sh` (ensure_maven)")
        want = _sha256(pom)
        tmp = lib_dir.parent / f"{lib_dir.name}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        log = lib_dir.parent / "maven.log"
        _log(f"fetching Apache Kafka {KAFKA_VERSION} jars from Maven Central into {lib_dir} (see {log})")
        started = time.monotonic()
        base = [mvn, "-B", "-ntp", "-f", str(pom), f"-Dkafka.lib.dir={tmp}", f"-Dkafka.agent.dir={agent_dir}"]
        # Both copies in one Maven run (one JVM start); if that fails, the classpath alone: the brokers can run
        # without the JMX exporter agent.
        if _run_logged([*base, "dependency:copy-dependencies", "dependency:copy@jmx-agent"], log) != 0:
            shutil.rmtree(tmp, ignore_errors=True)
            _log(f"warning: the JMX exporter agent could not be fetched (brokers run without it); see {log}")
            code = _run_logged([*base, "dependency:copy-dependencies"], log, append=True)
            if code != 0 or not any(tmp.glob("kafka_2.13-*.jar")):
                raise KafkaError(f"mvn dependency:copy-dependencies failed (exit {code}):\n{_tail(log)}")
        if not any(tmp.glob("kafka_2.13-*.jar")):
            raise KafkaError(f"Maven copied no kafka_2.13 jar into {tmp}:\n{_tail(log)}")
        old = lib_dir.parent / f"{lib_dir.name}.old"
        shutil.rmtree(old, ignore_errors=True)
        if lib_dir.exists():
            lib_dir.rename(old)
        tmp.rename(lib_dir)
        shutil.rmtree(old, ignore_errors=True)
        _log(f"{len(list(lib_dir.glob('*.jar')))} jars in {time.monotonic() - started:.1f}s")
        (lib_dir.parent / f"{lib_dir.name}.sha256").write_text(want + "\n")
    return lib_dir


def ensure_jmx_agent(pom: Path = POM, agent_dir: Path = AGENT_DIR) -> Path | None:
    """The JMX exporter agent jar, copied by Maven when it is missing (the jars' fetch may have gone without it);
    None, with a warning, when it cannot be had."""
    jar = agent_dir / JMX_AGENT_JAR.name
    if jar.is_file():
        return jar
    with _file_lock(LIB_DIR.parent / ".fetch.lock"):
        if jar.is_file():
            return jar
        mvn = shutil.which("mvn")
        log = LIB_DIR.parent / "maven-agent.log"
        if mvn is not None:
            _run_logged([mvn, "-B", "-ntp", "-f", str(pom), f"-Dkafka.agent.dir={agent_dir}",
                         "dependency:copy@jmx-agent"], log)
    if jar.is_file():
        return jar
    _log(f"warning: no JMX exporter agent at {jar} (see {log}); the brokers run without it")
    return None


def plugin_sources_sha256(pom: Path = PLUGINS_POM) -> str:
    """A sha256 of what the plugins are built from: the parent pom, each module's pom and every file under its
    ``src/`` (names and contents), and the engine's ``budget_share.lua`` (a resource of the quota callback's jar)."""
    digest = hashlib.sha256()
    root = pom.parent
    paths = [pom]
    for module in PLUGIN_MODULES:
        paths.append(root / module / "pom.xml")
        paths.extend(sorted(p for p in (root / module / "src").rglob("*") if p.is_file()))
    for path in paths:
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    digest.update(b"budget_share.lua\0" + BUDGET_LUA.read_bytes() + b"\0")
    return digest.hexdigest()


def _plugin_jars() -> tuple[Path, ...]:
    return (PLUGIN_JAR, QUOTA_CALLBACK_JAR)


def plugin_ready(pom: Path = PLUGINS_POM, stamp: Path = PLUGIN_STAMP) -> bool:
    """True when both plugin jars were built from the sources as they are now."""
    return (
        all(jar.is_file() for jar in _plugin_jars())
        and stamp.is_file()
        and stamp.read_text().strip() == plugin_sources_sha256(pom)
    )


def ensure_plugin_jars(pom: Path = PLUGINS_POM, stamp: Path = PLUGIN_STAMP) -> tuple[Path, Path]:
    """Build the broker plugins (one ``mvn package`` of the parent) unless the jars are current (a sha256 of their
    sources in ``stamp``); returns (telemetry exporter jar, quota callback jar).

    ``mvn -o`` first (no network once Maven's own plugins and the dependencies are in ~/.m2), online only when that
    fails; tests are left to ``mvn test`` (tests/broker_plugins). The build happens under ``.run/kafka/plugin-build``
    (never in the source tree, where a developer's ``mvn test`` may be running) and the jars replace the old ones
    only when complete.
    """
    if plugin_ready(pom, stamp):
        return PLUGIN_JAR, QUOTA_CALLBACK_JAR
    with _file_lock(KAFKA_DIR / ".fetch.lock"):
        if plugin_ready(pom, stamp):
            return PLUGIN_JAR, QUOTA_CALLBACK_JAR
        mvn = shutil.which("mvn")
        if mvn is None:
            raise KafkaError("Maven (mvn) is not installed: run `bash scripts/bootstrap.sh` (ensure_maven)")
        want = plugin_sources_sha256(pom)
        log = KAFKA_DIR / "plugin-maven.log"
        _log(f"building the broker plugins ({pom.parent}; see {log})")
        started = time.monotonic()
        base = [mvn, "-B", "-ntp", "-f", str(pom), f"-Dplugins.build.dir={PLUGIN_BUILD_DIR}", "-Dmaven.test.skip=true",
                "clean", "package"]
        code = _run_logged([base[0], "-o", *base[1:]], log)
        if code != 0:  # the first build: Maven's own plugins and Jedis come from Maven Central once
            code = _run_logged(base, log, append=True)
        built = [PLUGIN_BUILD_DIR / jar.stem / jar.name for jar in _plugin_jars()]
        if code != 0 or not all(b.is_file() for b in built):
            raise KafkaError(f"building the broker plugins failed (exit {code}):\n{_tail(log)}")
        PLUGIN_DIR.mkdir(parents=True, exist_ok=True)
        for source, jar in zip(built, _plugin_jars(), strict=True):
            tmp = jar.with_suffix(".tmp")
            shutil.copyfile(source, tmp)
            tmp.replace(jar)
        stamp.write_text(want + "\n")
        _log(f"broker plugins built in {time.monotonic() - started:.1f}s: {', '.join(j.name for j in _plugin_jars())}")
    return PLUGIN_JAR, QUOTA_CALLBACK_JAR


def ensure_plugin_jar() -> Path:
    """:func:`ensure_plugin_jars`, answering the KIP-714 exporter's jar (what the telemetry tests run)."""
    return ensure_plugin_jars()[0]


def exporter_stats_of(pid: int, jar: Path = PLUGIN_JAR, timeout: float = 60.0) -> dict[str, Any] | None:
    """The plugin's counters in the broker JVM ``pid`` (JMX ``kafka.server:type=portal-telemetry-exporter``, read
    by the plugin's StatsTool through the JDK's attach API), e.g. ``{"enqueued", "sent", "dropped", "failed",
    "rejected", "queuedepth", "queuecapacity", "lasterror", ...}``; None when the broker runs no exporter."""
    cmd = [java_executable(), *TOOL_JVM_OPTS, "-cp", str(jar), PLUGIN_STATS_CLASS, str(pid)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL, check=False)
    if proc.returncode == 2:
        return None
    if proc.returncode != 0:
        raise KafkaError(f"reading the exporter's counters of process {pid} failed:\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout)


def _run_logged(cmd: Sequence[str], log: Path, append: bool = False) -> int:
    with open(log, "a" if append else "w") as out:
        proc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, check=False)
    return proc.returncode
