"""The Spark edge of the ledger: the session, and the journal as a DataFrame.

One of the two modules of the project that import pyspark (with ``bridge.ledger.tables``); everything else
that runs Spark imports these lazily, so no other command pays for the JVM.

Master: ``local[*]`` (every core of this machine) unless ``--master`` or ``SPARK_MASTER`` names another,
e.g. ``spark://host:7077`` for a standalone cluster. The driver runs here (client mode); executors read
the journal and write the tables themselves, so on a cluster both folders must be on storage every
executor sees at the same path (``docs/journal-ledger.md``, "On a cluster").
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from bridge.core.journal_files import COLUMNS

DEFAULT_MASTER = "local[*]"
DEFAULT_DRIVER_MEMORY = "1g"
LOCAL_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
"""The driver JVM's options on a ``local`` master, where it also runs every task: the quick (C1) compiler
only, and the serial collector. A report is a short batch job on a small machine: the optimising compiler's
threads spent more CPU than they saved (100,000 events: 9 s instead of 19-25 s; 1,000,000: the same), and
G1's concurrent threads compete with the tasks for the same cores (``docs/journal-ledger.md``, "Where the
time goes"). ``--conf spark.driver.extraJavaOptions=...`` replaces them."""

_SPARK_TYPES: dict[str, T.DataType] = {
    "string": T.StringType(),
    "int64": T.LongType(),
    "int32": T.IntegerType(),
    "timestamp": T.TimestampType(),
}
JOURNAL_SCHEMA = T.StructType(
    [T.StructField(name, _SPARK_TYPES[kind]) for name, kind in COLUMNS]
    + [T.StructField("date", T.StringType()), T.StructField("hour", T.IntegerType())]
)
"""A rolled file's columns plus the two partition columns of its folder."""

LEDGER_COLUMNS = (
    "entity",
    "message_id",
    "trace_id",
    "kind",
    "time",
    "stream_ms",
    "stream_seq",
    "size",
    "namespace",
    "role",
    "path",
    "result",
    "count",
    "where",
    "reason",
    "queue",
    "from_role",
    "to_role",
)
"""The columns the ledger's tables use: what the de-duplicated events keep (and cache) of each row."""

_LOG4J = """status = error
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = spark %p %c{1}: %m%n
# PySpark's gateway is an "interpreter" to Spark, which resets the root level to WARN (and says so on
# stderr) unless the gateway's own logger is configured.
logger.gateway.name = org.apache.spark.api.python.PythonGatewayServer
logger.gateway.level = error
"""


def master_url(option: str | None) -> str:
    """``--master``, else ``SPARK_MASTER``, else ``local[*]``."""
    return option or os.environ.get("SPARK_MASTER") or DEFAULT_MASTER


def worker_python() -> str:
    """The Python the executors start for Python work: ``PYSPARK_PYTHON`` (a cluster's workers may keep
    theirs elsewhere), else this interpreter (a worker on this machine, or one installed alike)."""
    return os.environ.get("PYSPARK_PYTHON") or sys.executable


def local_cores(master: str) -> int | None:
    """The cores a ``local`` master runs tasks on (``local``: 1, ``local[N]``: N, ``local[*]``: all of this
    machine's), None for any other master.

    The report's shuffles default to one partition per core there: a task costs scheduling and a file of
    shuffle output whatever its size, and more partitions than cores run no faster on one machine.
    """
    if master == "local":
        return 1
    if not master.startswith("local["):
        return None
    inside = master[len("local[") :].split("]", 1)[0].split(",", 1)[0].strip()
    if inside == "*":
        return os.cpu_count() or 1
    return int(inside) if inside.isdigit() and int(inside) > 0 else None


def _log_config() -> Path:
    # Spark's own INFO/WARN lines would bury the progress display and the JSON; errors still show.
    path = Path(tempfile.gettempdir()) / "bridge-ledger-log4j2.properties"
    if not path.exists() or path.read_text() != _LOG4J:
        path.write_text(_LOG4J)
    return path


DEBUGGING = "spark.python.sql.dataFrameDebugging.enabled"


def build_session(
    master: str,
    driver_memory: str = DEFAULT_DRIVER_MEMORY,
    shuffle_partitions: int | None = None,
    conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """A Spark session for the report (an existing one in this process is reused as it is)."""
    local = master.startswith("local")
    log_option = f"-Dlog4j2.configurationFile=file:{_log_config()}"
    driver_options = f"{log_option} {LOCAL_JVM_OPTIONS}" if local else log_option
    builder = (
        SparkSession.builder.master(master)
        .appName("bridge-report")
        .config("spark.driver.memory", driver_memory)
        .config("spark.driver.extraJavaOptions", driver_options)
        .config("spark.executor.extraJavaOptions", log_option)
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.pyspark.python", worker_python())
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions or local_cores(master) or 64))
        # PySpark's DataFrame debugging records the Python call site of every Column function in the JVM
        # (five Py4J calls and a walk of the Python stack each): about 2,200 calls and a third of a live
        # ledger's micro-batch. It only adds the Python line to an analysis error's message.
        .config(DEBUGGING, "false")
    )
    if local:
        # No web UI and loopback only: a report is a batch job, not a service. Adaptive execution off:
        # with one shuffle partition per core there is nothing left for it to coalesce, and it plans each
        # query again at every shuffle and runs each stage as a Spark job of its own (about twice the jobs;
        # docs/journal-ledger.md, "Where the time goes").
        builder = builder.config("spark.ui.enabled", "false").config("spark.driver.host", "127.0.0.1")
        builder = builder.config("spark.driver.bindAddress", "127.0.0.1")
        builder = builder.config("spark.sql.adaptive.enabled", "false")
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session


def uri(path: Path) -> str:
    """``file://`` URI of a local path (a cluster's executors resolve it on their own file system)."""
    return path.resolve().as_uri()


def read_journal(spark: SparkSession, directory: Path) -> DataFrame:
    """Every rolled event once: files of ``directory`` (any depth of ``date=/hour=`` folders), with repeated
    ``event_id`` s (a partition rolled twice, a file copied) dropped.

    The de-duplication shuffles by (entity, message_id) first, so the per-message aggregation that follows
    reuses that partitioning instead of shuffling the events a second time.
    """
    frame = read_rolled(spark, directory)
    deduplicated = frame.repartition("entity", "message_id").dropDuplicates(
        ["entity", "message_id", "event_id"]
    )
    return deduplicated.select(*LEDGER_COLUMNS)


def read_rolled(spark: SparkSession, directory: Path) -> DataFrame:
    """The rolled files as they are (a repeated event appears as often as it was written)."""
    directory.mkdir(parents=True, exist_ok=True)
    return spark.read.schema(JOURNAL_SCHEMA).option("basePath", uri(directory)).parquet(uri(directory))


def read_snapshot(spark: SparkSession, outbox: Path, watermarks: Path) -> tuple[DataFrame, DataFrame]:
    """The live outbox snapshot (``bridge.ledger.live``) as DataFrames."""
    return spark.read.parquet(uri(outbox)), spark.read.parquet(uri(watermarks))


def empty_snapshot(spark: SparkSession) -> tuple[DataFrame, DataFrame]:
    """No snapshot: empty frames with the snapshot's columns (built in the JVM, no Python data shipped)."""
    nothing = spark.range(0)
    outbox = nothing.select(
        F.lit(None).cast("string").alias("entity"), F.lit(None).cast("string").alias("message_id")
    )
    marks = nothing.select(
        F.lit(None).cast("string").alias("entity"),
        F.lit(None).cast("long").alias("wm_ms"),
        F.lit(None).cast("long").alias("wm_seq"),
    )
    return outbox, marks


def owns_session() -> bool:
    """False when this process already runs a Spark session (``build_session`` then reuses it, and the
    caller must not stop it)."""
    return SparkSession.getActiveSession() is None


__all__ = ["JOURNAL_SCHEMA", "F", "build_session", "master_url", "read_journal", "read_snapshot", "uri"]
