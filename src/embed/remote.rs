//! An OpenAI-compatible embeddings server (placeholder until written).

use super::{Fingerprint, RemoteConfig};
use crate::error::{Error, Result};

fn missing(config: &RemoteConfig) -> Error {
    Error::Model {
        model: config.url.clone(),
        message: "remote models are not built yet".into(),
    }
}

pub fn stat_key(config: &RemoteConfig) -> String {
    config.url.clone()
}

pub fn fingerprint(_config: &RemoteConfig) -> Fingerprint {
    Fingerprint([0; 32])
}

pub struct RemoteModel;

impl RemoteModel {
    pub fn new(config: &RemoteConfig) -> Result<RemoteModel> {
        Err(missing(config))
    }
}

impl super::Embedder for RemoteModel {
    fn fingerprint(&self) -> Fingerprint {
        Fingerprint([0; 32])
    }
    fn dims(&self) -> usize {
        0
    }
    fn describe(&self) -> serde_json::Value {
        serde_json::Value::Null
    }
    fn embed_passages(&self, _texts: &[&str]) -> Result<Vec<Vec<f32>>> {
        Ok(Vec::new())
    }
    fn embed_query(&self, _text: &str) -> Result<Vec<f32>> {
        Ok(Vec::new())
    }
}
