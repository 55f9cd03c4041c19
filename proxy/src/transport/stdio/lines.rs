//! Newline-delimited reading with a line limit and bounded memory.
//!
//! A line longer than the limit is never buffered whole: its first and last
//! [`KEPT_EDGE_BYTES`] bytes are kept (enough to find a JSON-RPC id and to log it) and the rest
//! is discarded as it streams past (issue 4, "line limit `maxLineBytes`").

use std::io;

use tokio::io::{AsyncBufRead, AsyncBufReadExt};

/// Bytes kept from each end of an over-long line.
pub const KEPT_EDGE_BYTES: usize = 1024;

/// One line read from a stream, without its `\n`.
#[derive(Debug, PartialEq, Eq)]
pub enum Line {
    /// A line within the limit.
    Complete(Vec<u8>),
    /// A line over the limit: its total length in bytes and its two ends.
    TooLong {
        /// Length of the whole line in bytes (without the `\n`).
        bytes: u64,
        /// Its first [`KEPT_EDGE_BYTES`] bytes.
        head: Vec<u8>,
        /// Its last [`KEPT_EDGE_BYTES`] bytes.
        tail: Vec<u8>,
    },
}

/// Reads [`Line`]s of at most `max` bytes from a buffered reader.
pub struct LineReader<R> {
    inner: R,
    max: usize,
}

impl<R: AsyncBufRead + Unpin> LineReader<R> {
    /// Wraps `inner`; lines longer than `max` bytes come back as [`Line::TooLong`].
    pub fn new(inner: R, max: usize) -> Self {
        Self { inner, max }
    }

    /// The next line; `None` at end of stream. A last line without `\n` is returned as is.
    ///
    /// # Errors
    /// The reader's I/O error.
    ///
    /// # Cancellation
    /// Not cancel-safe: a partly read line is lost if the future is dropped.
    pub async fn next_line(&mut self) -> io::Result<Option<Line>> {
        let mut line = Vec::new();
        let mut total: u64 = 0;
        let mut over: Option<(Vec<u8>, Vec<u8>)> = None;
        loop {
            let buffer = self.inner.fill_buf().await?;
            if buffer.is_empty() {
                if total == 0 && over.is_none() {
                    return Ok(None);
                }
                break;
            }
            let (used, content, found) = match buffer.iter().position(|b| *b == b'\n') {
                Some(at) => (at + 1, &buffer[..at], true),
                None => (buffer.len(), buffer, false),
            };
            total += content.len() as u64;
            match &mut over {
                None if line.len() + content.len() <= self.max => line.extend_from_slice(content),
                None => {
                    line.extend_from_slice(&content[..KEPT_EDGE_BYTES.min(content.len())]);
                    let head = line[..KEPT_EDGE_BYTES.min(line.len())].to_vec();
                    let mut tail = Vec::new();
                    keep_tail(&mut tail, content);
                    line = Vec::new();
                    over = Some((head, tail));
                }
                Some((head, tail)) => {
                    let room = KEPT_EDGE_BYTES.saturating_sub(head.len());
                    head.extend_from_slice(&content[..room.min(content.len())]);
                    keep_tail(tail, content);
                }
            }
            self.inner.consume(used);
            if found {
                break;
            }
        }
        Ok(Some(match over {
            None => Line::Complete(line),
            Some((head, tail)) => Line::TooLong {
                bytes: total,
                head,
                tail,
            },
        }))
    }
}

fn keep_tail(tail: &mut Vec<u8>, content: &[u8]) {
    let start = content.len().saturating_sub(KEPT_EDGE_BYTES);
    tail.extend_from_slice(&content[start..]);
    if tail.len() > KEPT_EDGE_BYTES {
        tail.drain(..tail.len() - KEPT_EDGE_BYTES);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn read_all(input: &[u8], max: usize) -> Vec<Line> {
        let reader = tokio::io::BufReader::with_capacity(64, input);
        let mut lines = LineReader::new(reader, max);
        let mut out = Vec::new();
        while let Some(line) = lines.next_line().await.expect("read") {
            out.push(line);
        }
        out
    }

    #[tokio::test]
    async fn lines_within_limit_come_back_whole() {
        let out = read_all(b"a\n\nbc\nlast", 10).await;
        assert_eq!(
            out,
            vec![
                Line::Complete(b"a".to_vec()),
                Line::Complete(Vec::new()),
                Line::Complete(b"bc".to_vec()),
                Line::Complete(b"last".to_vec()),
            ]
        );
    }

    #[tokio::test]
    async fn over_long_line_keeps_only_its_edges_and_the_next_line_survives() {
        let mut input = b"{\"id\":7,".to_vec();
        input.extend(std::iter::repeat_n(b'x', 5000));
        input.extend_from_slice(b"END}\nnext\n");
        let out = read_all(&input, 100).await;
        assert_eq!(out.len(), 2);
        let Line::TooLong { bytes, head, tail } = &out[0] else {
            panic!("expected TooLong, got {:?}", out[0]);
        };
        assert_eq!(*bytes, 5012);
        assert!(head.starts_with(b"{\"id\":7,"));
        assert_eq!(head.len(), KEPT_EDGE_BYTES);
        assert!(tail.ends_with(b"END}"));
        assert_eq!(tail.len(), KEPT_EDGE_BYTES);
        assert_eq!(out[1], Line::Complete(b"next".to_vec()));
    }
}
