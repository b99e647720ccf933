"""The ledger: ``bridge report``'s PySpark job over the rolled journal (``bridge.journal``).

``spark``, ``tables``, ``job`` and ``follow`` import pyspark and are imported only by the ``report``
command (lazily), so no other process pays for the JVM; ``live``, ``html`` and ``svg`` do not need Spark.
"""
