//! A local sentence-transformers model run with candle (placeholder until written).

use super::{Fingerprint, LocalConfig};
use crate::error::{Error, Result};

fn missing(config: &LocalConfig) -> Error {
    Error::Model {
        model: config.dir.display().to_string(),
        message: "local models are not built yet".into(),
    }
}

pub fn stat_key(config: &LocalConfig) -> Result<String> {
    Err(missing(config))
}

pub fn fingerprint(config: &LocalConfig) -> Result<Fingerprint> {
    Err(missing(config))
}

pub struct LocalModel;

impl LocalModel {
    pub fn load(config: &LocalConfig) -> Result<LocalModel> {
        Err(missing(config))
    }
}

impl super::Embedder for LocalModel {
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
