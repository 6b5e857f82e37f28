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

/// The most query tokens used, over all the query's parts; longer queries keep their first
/// tokens, and the rest of the text is not even read, so a query's cost is bounded whatever its
/// length (`"a b"` repeated a million times is one million phrases otherwise).
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
    let mut budget = MAX_TOKENS;
    let mut clauses: Vec<(Occur, Box<dyn Query>)> = Vec::new();
    // Odd-numbered parts of a split on '"' are the quoted phrases.
    for (i, part) in text.split('"').enumerate() {
        if budget == 0 {
            break;
        }
        let mut tokens = Vec::new();
        let mut stream = analyzer.token_stream(part);
        while tokens.len() < budget && stream.advance() {
            tokens.push(stream.token().text.clone());
        }
        budget -= tokens.len();
        for token in &tokens {
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

#[cfg(test)]
mod tests {
    use tantivy::query::BooleanQuery;
    use tantivy::schema::{Schema, TEXT};

    use super::{MAX_TOKENS, build};
    use crate::index::QueryConfig;

    /// The number of clauses the query for `text` has.
    fn clauses(text: &str) -> usize {
        let mut schema = Schema::builder();
        let heading = schema.add_text_field("heading", TEXT);
        let body = schema.add_text_field("body", TEXT);
        let index = tantivy::Index::create_in_ram(schema.build());
        let query = build(&index, heading, body, text, &QueryConfig::default());
        query
            .downcast_ref::<BooleanQuery>()
            .map_or(0, |query| query.clauses().len())
    }

    #[test]
    fn a_query_has_at_most_its_token_budget_of_clauses() {
        assert_eq!(clauses("key rotation"), 4);
        assert_eq!(clauses("\"key rotation\""), 5);
        let bound = 2 * MAX_TOKENS + MAX_TOKENS / 2;
        for text in [
            "\"a b\" ".repeat(100_000),
            "word ".repeat(100_000),
            "\"".repeat(100_000),
            "\"a b c d e f g h\" x ".repeat(10_000),
        ] {
            let n = clauses(&text);
            assert!(n <= bound, "{n} clauses from {} bytes", text.len());
        }
    }
}
