//! Embedding models and their vectors as both ledgers hold them: a model's row, coverage and
//! what gc removed, and the one byte encoding of a vector (little-endian f32s).

use crate::embed::Fingerprint;

/// A model as the ledger knows it.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelRow {
    pub fingerprint: Fingerprint,
    /// What `Embedder::describe` said of it, as JSON.
    pub description: serde_json::Value,
    pub dims: usize,
    /// When its vectors first covered every chunk (ms since the epoch), if they did.
    pub active_since: Option<i64>,
}

/// How many of the ledger's chunks have a vector under one model.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct VectorCoverage {
    pub vectors: u64,
    pub chunks: u64,
}

/// What `gc` removed from the vectors.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VectorGc {
    /// Vectors of models search used before the active one.
    pub other_models: u64,
    /// Vectors whose chunk the ledger no longer holds.
    pub orphans: u64,
}

/// A vector as stored: little-endian f32.
pub(crate) fn encode_vector(vector: &[f32]) -> Vec<u8> {
    vector.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// The f32s of a stored vector; `None` when the length is not a whole number of them.
pub(crate) fn decode_vector(bytes: &[u8]) -> Option<Vec<f32>> {
    if !bytes.len().is_multiple_of(4) {
        return None;
    }
    Some(
        bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes(b.try_into().expect("four bytes")))
            .collect(),
    )
}
