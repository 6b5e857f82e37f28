//! Query text to a Tantivy query. It cannot fail: there is no syntax to get wrong.
//!
//! The text goes through the same analyzer as the index (simple tokens, lower case, English
//! stemmer). Every token becomes a SHOULD term over the body (heading path and text) and over the
//! heading path alone (boosted),
//! and every "quoted phrase" of two or more tokens adds a SHOULD phrase clause that rewards the
//! exact sequence, so quotes help without being required. Scoring is BM25. Characters that other
//! query languages treat as operators (`+ - : ( ) AND OR`) are plain text here: an agent's query
//! never fails and never silently excludes a word.

use tantivy::Index;
use tantivy::Term;
use tantivy::query::{BooleanQuery, BoostQuery, EmptyQuery, Occur, PhraseQuery, Query, TermQuery};
use tantivy::schema::{Field, IndexRecordOption};
use tantivy::tokenizer::TokenStream;

use crate::index::QueryConfig;

/// The most query tokens used; longer queries keep their first tokens.
const MAX_TOKENS: usize = 1_024;

/// Builds the query for `text`. A query with no tokens matches nothing.
pub(crate) fn build(
    index: &Index,
    heading: Field,
    text_field: Field,
    text: &str,
    config: &QueryConfig,
) -> Box<dyn Query> {
    let Ok(mut analyzer) = index.tokenizer_for_field(text_field) else {
        return Box::new(EmptyQuery);
    };
    let mut tokenize = |part: &str| -> Vec<String> {
        let mut tokens = Vec::new();
        let mut stream = analyzer.token_stream(part);
        while stream.advance() && tokens.len() < MAX_TOKENS {
            tokens.push(stream.token().text.clone());
        }
        tokens
    };
    let mut clauses: Vec<(Occur, Box<dyn Query>)> = Vec::new();
    // Odd-numbered parts of a split on '"' are the quoted phrases.
    for (i, part) in text.split('"').enumerate() {
        let tokens = tokenize(part);
        for token in &tokens {
            if clauses.len() >= 2 * MAX_TOKENS {
                break;
            }
            clauses.push((Occur::Should, term(text_field, token)));
            clauses.push((
                Occur::Should,
                Box::new(BoostQuery::new(term(heading, token), config.heading_boost)),
            ));
        }
        if i % 2 == 1 && tokens.len() > 1 {
            let terms = tokens
                .iter()
                .map(|t| Term::from_field_text(text_field, t))
                .collect();
            clauses.push((Occur::Should, Box::new(PhraseQuery::new(terms))));
        }
    }
    if clauses.is_empty() {
        return Box::new(EmptyQuery);
    }
    Box::new(BooleanQuery::new(clauses))
}

fn term(field: Field, token: &str) -> Box<dyn Query> {
    Box::new(TermQuery::new(
        Term::from_field_text(field, token),
        IndexRecordOption::WithFreqs,
    ))
}
