//! trace-record: trace sessions, the JSONL trace schema and the validating reader.
