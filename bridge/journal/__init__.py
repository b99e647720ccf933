"""The journal's Redis adapter and its roll into Parquet.

``JournalStore`` appends lifecycle events (``bridge.core.journal``) to per-entity streams, bounded and in
batches; ``roll`` moves them into Parquet files that ``bridge report`` (``bridge.ledger``) reads.
"""
