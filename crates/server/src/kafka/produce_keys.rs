//! Kafka's rule for produces to a compacted topic (`cleanup.policy` with `compact`): every
//! record must have a key; a batch with a keyless record is refused whole with INVALID_RECORD,
//! the record errors and the message Kafka's `LogValidator` gives.

use bytes::Bytes;
use kafka_proto::messages::produce_response::BatchIndexAndErrorMessage;
use kafka_proto::records::batch::RecordBatch;

/// Whether a validated batch holds a record without a key (refused on a compacted topic). A
/// batch that cannot be read here was refused by validation already.
pub fn has_keyless_record(batch: &Bytes) -> bool {
    let Ok(parsed) = RecordBatch::new(batch.clone()) else {
        return false;
    };
    let mut keyless = false;
    let _ = kafka_proto::records::visit_records(&parsed, usize::MAX, |r| {
        keyless |= r.key.is_none();
    });
    keyless
}

/// Kafka's answer to a produce of records without a key to a compacted topic
/// (`LogValidator`): one record error per keyless record (its index in the batch), and the
/// partition's error message naming the count and the first three.
pub fn keyless_record_errors(
    batch: &Bytes,
    topic: &str,
    partition: i32,
) -> (Vec<BatchIndexAndErrorMessage>, String) {
    let reason = format!(
        "Compacted topic cannot accept message without key in topic partition {topic}-{partition}."
    );
    let mut errors = Vec::new();
    if let Ok(parsed) = RecordBatch::new(batch.clone()) {
        let mut index = 0i32;
        let _ = kafka_proto::records::visit_records(&parsed, usize::MAX, |r| {
            if r.key.is_none() {
                errors.push(BatchIndexAndErrorMessage {
                    batch_index: index,
                    batch_index_error_message: Some(reason.clone()),
                    ..Default::default()
                });
            }
            index = index.saturating_add(1);
        });
    }
    let shown: Vec<String> = errors
        .iter()
        .take(3)
        .map(|e| {
            format!(
                "RecordError(batchIndex={}, message='{reason}')",
                e.batch_index
            )
        })
        .collect();
    let message = format!(
        "One or more records have been rejected due to {} record errors in total, and only \
         showing the first three errors at most: [{}]",
        errors.len(),
        shown.join(", ")
    );
    (errors, message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metadata::wall_clock_ms;
    use kafka_proto::records::Compression;

    #[test]
    fn keyless_records_are_named_by_their_index_in_the_batch() {
        use kafka_proto::records::NewRecord;
        let keyed = |k: &str| {
            NewRecord::new(wall_clock_ms(), b"v".to_vec()).with_key(k.as_bytes().to_vec())
        };
        let keyless = || NewRecord::new(wall_clock_ms(), b"v".to_vec());
        let all_keyed =
            kafka_proto::records::build_batch(Compression::None, &[keyed("a"), keyed("b")])
                .unwrap();
        assert!(!has_keyless_record(&all_keyed));
        let mixed = kafka_proto::records::build_batch(
            Compression::None,
            &[keyed("a"), keyless(), keyed("b"), keyless()],
        )
        .unwrap();
        assert!(has_keyless_record(&mixed));
        let (errors, message) = keyless_record_errors(&mixed, "t", 3);
        assert_eq!(
            errors.iter().map(|e| e.batch_index).collect::<Vec<_>>(),
            [1, 3]
        );
        assert_eq!(
            errors[0].batch_index_error_message.as_deref(),
            Some("Compacted topic cannot accept message without key in topic partition t-3.")
        );
        assert!(message.contains("due to 2 record errors"), "{message}");
    }
}
