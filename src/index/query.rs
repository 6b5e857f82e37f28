//! Query text to a Tantivy query: lenient, so an agent's query never fails for its syntax.
//!
//! Tantivy's lenient parser keeps what it can of a malformed query (an unclosed quote, a stray
//! `:` or `(`) and drops the rest; every remaining term is a SHOULD clause over the heading path
//! (boosted) and the text, stemmed like the index, and scored by BM25.

use tantivy::Index;
use tantivy::query::{EmptyQuery, Query, QueryParser};
use tantivy::schema::Field;

use crate::index::QueryConfig;

/// Builds the query for `text`. An empty or unparseable query matches nothing.
pub(crate) fn build(
    index: &Index,
    heading: Field,
    text_field: Field,
    text: &str,
    config: &QueryConfig,
) -> Box<dyn Query> {
    if text.trim().is_empty() {
        return Box::new(EmptyQuery);
    }
    let mut parser = QueryParser::for_index(index, vec![heading, text_field]);
    parser.set_field_boost(heading, config.heading_boost);
    let (query, _ignored_errors) = parser.parse_query_lenient(text);
    query
}
