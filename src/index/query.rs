//! Query text to a Tantivy query. It cannot fail: there is no syntax to get wrong.
//!
//! The text goes through the same analyzer as the index (`index::tokenizer`: identifier-aware
//! words, whole and in parts, lower case, English stemmer). Every token becomes a SHOULD term
//! over the body (heading path and text) and over each boosted field: the heading path alone,
//! the file name stems, the titles and the identifier fields of the chunk's documents. Every
//! "quoted phrase" of two or more positions adds a SHOULD phrase clause over the body that
//! rewards the exact sequence of parts (a word's whole shares its first part's position and
//! is left out of it), so quotes help without being required. Scoring is BM25. Characters that other
//! query languages treat as operators (`+ - : ( ) AND OR`) are plain text here: an agent's query
//! never fails and never silently excludes a word.

use tantivy::Index;
use tantivy::Term;
use tantivy::query::{BooleanQuery, BoostQuery, EmptyQuery, Occur, PhraseQuery, Query, TermQuery};
use tantivy::schema::{Field, IndexRecordOption};
use tantivy::tokenizer::TokenStream;

use crate::index::{Fields, QueryConfig};

/// The most query tokens used, over all the query's parts; longer queries keep their first
/// tokens, and the rest of the text is not even read, so a query's cost is bounded whatever its
/// length (`"a b"` repeated a million times is one million phrases otherwise).
const MAX_TOKENS: usize = 1_024;

/// Builds the query for `text`. A query with no tokens matches nothing.
pub(crate) fn build(
    index: &Index,
    fields: &Fields,
    text: &str,
    config: &QueryConfig,
) -> Box<dyn Query> {
    let text_field = fields.body;
    let boosted = [
        (fields.heading, config.heading_boost),
        (fields.names, config.name_boost),
        (fields.titles, config.title_boost),
        (fields.ids, config.id_boost),
    ];
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
        let mut tokens: Vec<(usize, String)> = Vec::new();
        let mut stream = analyzer.token_stream(part);
        while tokens.len() < budget && stream.advance() {
            let token = stream.token();
            tokens.push((token.position, token.text.clone()));
        }
        budget -= tokens.len();
        for (_, token) in &tokens {
            clauses.push((Occur::Should, term(text_field, token)));
            for (field, boost) in boosted {
                if boost > 0.0 {
                    clauses.push((
                        Occur::Should,
                        Box::new(BoostQuery::new(term(field, token), boost)),
                    ));
                }
            }
        }
        if i % 2 == 1 {
            // One term per position, the last one there: a word's part, not its whole.
            let mut terms: Vec<(usize, Term)> = Vec::new();
            for (position, token) in &tokens {
                let term = Term::from_field_text(text_field, token);
                match terms.last_mut() {
                    Some((last, slot)) if *last == *position => *slot = term,
                    _ => terms.push((*position, term)),
                }
            }
            if terms.len() > 1 {
                let first = terms[0].0;
                let terms = terms
                    .into_iter()
                    .map(|(position, term)| (position - first, term))
                    .collect();
                clauses.push((Occur::Should, Box::new(PhraseQuery::new_with_offset(terms))));
            }
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

    use super::{MAX_TOKENS, build};
    use crate::index::{QueryConfig, schema, tokenizer};

    /// Clauses per token: the body and the four boosted fields.
    const PER_TOKEN: usize = 5;

    /// The number of clauses the query for `text` has.
    fn clauses(text: &str) -> usize {
        let (schema, fields) = schema();
        let index = tantivy::Index::create_in_ram(schema);
        index
            .tokenizers()
            .register(tokenizer::NAME, tokenizer::analyzer());
        let query = build(&index, &fields, text, &QueryConfig::default());
        query
            .downcast_ref::<BooleanQuery>()
            .map_or(0, |query| query.clauses().len())
    }

    #[test]
    fn a_query_has_at_most_its_token_budget_of_clauses() {
        assert_eq!(clauses("key rotation"), 2 * PER_TOKEN);
        assert_eq!(clauses("\"key rotation\""), 2 * PER_TOKEN + 1);
        // A word of two parts is three tokens at two positions: still one phrase.
        assert_eq!(clauses("\"eip-1559 fee\""), 4 * PER_TOKEN + 1);
        let bound = PER_TOKEN * MAX_TOKENS + MAX_TOKENS / 2;
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
