//! Follows the requests on a connection through its bytes as they are read, as HTTP/1.1 frames them (each head,
//! then its body by Content-Length or chunked), to tell which request's head gives both Transfer-Encoding and
//! Content-Length: hyper frames such a request by Transfer-Encoding and drops its Content-Length before the API
//! sees it. Bytes hyper would refuse end the following (hyper closes the connection on them too).

/// The longest line kept; the end of a longer one is not looked at.
const KEPT_LINE_BYTES: usize = 1024;

/// Where a connection's bytes stand.
#[derive(Debug)]
enum Place {
    /// In a request's head (leading empty lines included).
    Head(Head),
    /// In a body of Content-Length: the bytes still to come.
    Body(u64),
    /// At a chunk's size line.
    ChunkSize,
    /// In a chunk: its bytes still to come.
    ChunkData(u64),
    /// At the line break that ends a chunk.
    ChunkEnd,
    /// In the trailer fields after the last chunk.
    Trailers,
    /// Not followed further: a request with both lengths was found, or bytes hyper refuses.
    Stopped,
}

/// What a head has said so far about its body.
#[derive(Debug, Default)]
struct Head {
    request_line_seen: bool,
    has_content_length: bool,
    has_transfer_encoding: bool,
    body: Framing,
}

/// A body's framing, as its head gives it.
#[derive(Debug, Default, Clone, Copy)]
enum Framing {
    #[default]
    None,
    Length(u64),
    Chunked,
    /// One hyper refuses, or that a line too long to keep hides.
    Unknown,
}

/// One connection's requests, followed through its bytes.
#[derive(Debug)]
pub(crate) struct RequestHeads {
    place: Place,
    /// The line being read, up to `KEPT_LINE_BYTES` of it.
    line: Vec<u8>,
    line_cut: bool,
    /// Heads read whole so far.
    heads: u64,
}

impl Default for RequestHeads {
    fn default() -> Self {
        RequestHeads { place: Place::Head(Head::default()), line: Vec::new(), line_cut: false, heads: 0 }
    }
}

impl RequestHeads {
    /// Follows `bytes`, the next ones read; the index (from 0, in the connection's order) of a request whose head
    /// they complete giving both Transfer-Encoding and Content-Length.
    pub(crate) fn follow(&mut self, mut bytes: &[u8]) -> Option<u64> {
        while !bytes.is_empty() {
            match &mut self.place {
                Place::Stopped => return None,
                Place::Body(left) | Place::ChunkData(left) => {
                    let taken = (*left).min(bytes.len() as u64);
                    *left -= taken;
                    bytes = &bytes[taken as usize..];
                    if *left == 0 {
                        let body_ended = matches!(self.place, Place::Body(_));
                        self.place = if body_ended { Place::Head(Head::default()) } else { Place::ChunkEnd };
                    }
                }
                _ => {
                    let Some(end) = bytes.iter().position(|&b| b == b'\n') else {
                        self.keep(bytes);
                        return None;
                    };
                    self.keep(&bytes[..end]);
                    bytes = &bytes[end + 1..];
                    if let Some(both) = self.line_ended() {
                        return Some(both);
                    }
                }
            }
        }
        None
    }

    fn keep(&mut self, bytes: &[u8]) {
        let room = KEPT_LINE_BYTES - self.line.len();
        self.line_cut |= bytes.len() > room;
        self.line.extend_from_slice(&bytes[..room.min(bytes.len())]);
    }

    /// Moves on past the line just read; the head's index if it ended a head giving both lengths.
    fn line_ended(&mut self) -> Option<u64> {
        let mut line = std::mem::take(&mut self.line);
        let cut = std::mem::take(&mut self.line_cut);
        if line.last() == Some(&b'\r') {
            line.pop();
        }
        let place = std::mem::replace(&mut self.place, Place::Stopped);
        self.place = match place {
            Place::Head(head) => return self.head_line(head, &line, cut),
            Place::ChunkSize => match chunk_size(&line) {
                Some(0) => Place::Trailers,
                Some(size) => Place::ChunkData(size),
                None => Place::Stopped,
            },
            Place::ChunkEnd => Place::ChunkSize,
            Place::Trailers if line.is_empty() => Place::Head(Head::default()),
            Place::Trailers => Place::Trailers,
            Place::Body(_) | Place::ChunkData(_) | Place::Stopped => Place::Stopped,
        };
        None
    }

    fn head_line(&mut self, mut head: Head, line: &[u8], cut: bool) -> Option<u64> {
        if !line.is_empty() {
            // The request line (empty lines before it are skipped), then one field a line.
            let taken = !head.request_line_seen || head.field(line, cut);
            head.request_line_seen = true;
            self.place = if taken { Place::Head(head) } else { Place::Stopped };
            return None;
        }
        if !head.request_line_seen {
            self.place = Place::Head(head);
            return None;
        }
        let index = self.heads;
        self.heads += 1;
        if head.has_transfer_encoding && head.has_content_length {
            return Some(index);
        }
        self.place = match head.body {
            Framing::None | Framing::Length(0) => Place::Head(Head::default()),
            Framing::Length(length) => Place::Body(length),
            Framing::Chunked => Place::ChunkSize,
            Framing::Unknown => Place::Stopped,
        };
        None
    }
}

impl Head {
    /// Takes a header field line (`cut` when only its start was kept), as hyper reads it: a Content-Length after
    /// a Transfer-Encoding is not looked at, a Transfer-Encoding overrides a Content-Length. False if it is not a
    /// field line.
    fn field(&mut self, line: &[u8], cut: bool) -> bool {
        let Some(colon) = line.iter().position(|&b| b == b':') else { return false };
        let (name, value) = (&line[..colon], line[colon + 1..].trim_ascii());
        if name.eq_ignore_ascii_case(b"content-length") {
            self.has_content_length = true;
            if !self.has_transfer_encoding {
                let length = std::str::from_utf8(value).ok().filter(|v| !cut && v.bytes().all(|b| b.is_ascii_digit()));
                self.body = match (self.body, length.and_then(|v| v.parse().ok())) {
                    (Framing::None, Some(length)) => Framing::Length(length),
                    (Framing::Length(earlier), Some(length)) if earlier == length => self.body,
                    _ => Framing::Unknown,
                };
            }
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            self.has_transfer_encoding = true;
            let last = value.rsplit(|&b| b == b',').next().unwrap_or_default();
            let chunked = !cut && last.trim_ascii().eq_ignore_ascii_case(b"chunked");
            self.body = if chunked { Framing::Chunked } else { Framing::Unknown };
        }
        true
    }
}

/// The size a chunk's size line gives (hex digits, then perhaps extensions).
fn chunk_size(line: &[u8]) -> Option<u64> {
    let digits = line.iter().take_while(|b| b.is_ascii_hexdigit()).count();
    let size = std::str::from_utf8(&line[..digits]).ok()?;
    u64::from_str_radix(size, 16).ok()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    //! A head giving both lengths is found in either order, however the bytes are split, after any bodies before
    //! it (Content-Length or chunked, with extensions and trailers), and only there: not in a body's bytes.

    use super::RequestHeads;

    const BOTH: &str = "POST /infer HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n";

    /// The index `follow` reports for `bytes` fed whole, and fed a byte at a time (which must agree).
    fn both_lengths_at(bytes: &str) -> Option<u64> {
        let whole = RequestHeads::default().follow(bytes.as_bytes());
        let mut heads = RequestHeads::default();
        let bytewise = bytes.as_bytes().chunks(1).find_map(|byte| heads.follow(byte));
        assert_eq!(whole, bytewise, "fed whole and a byte at a time: {bytes:?}");
        whole
    }

    #[test]
    fn a_head_giving_both_lengths_is_found_in_either_order_and_in_any_case() {
        assert_eq!(both_lengths_at(BOTH), Some(0));
        let length_first = "POST / HTTP/1.1\r\ncontent-length: 4\r\nTRANSFER-ENCODING: chunked\r\n\r\n0\r\n\r\n";
        assert_eq!(both_lengths_at(length_first), Some(0));
        let unreadable_length = "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: lots\r\n\r\n";
        assert_eq!(both_lengths_at(unreadable_length), Some(0), "hyper does not read a length after the encoding");
    }

    #[test]
    fn heads_after_bodies_of_either_framing_are_counted_in_order() {
        let get = "\r\nGET /healthz HTTP/1.1\r\nHost: t\r\n\r\n";
        let sized = "POST /infer HTTP/1.1\r\nContent-Length: 16\r\n\r\n{\"prompt\": \"hi\"}";
        let chunked = "POST /infer HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n\
                       5;name=value\r\n{\"pro\r\n0b\r\nmpt\": \"hi\"}\r\n0\r\nExpires: never\r\n\r\n";
        assert_eq!(both_lengths_at(&format!("{get}{sized}{chunked}{BOTH}")), Some(3));
        assert_eq!(both_lengths_at(&format!("{get}{sized}{chunked}")), None);
    }

    #[test]
    fn field_lines_inside_a_body_are_not_a_head() {
        let inner = "Transfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n";
        let sized = format!("POST /v1/files HTTP/1.1\r\nContent-Length: {}\r\n\r\n{inner}", inner.len());
        let chunked = format!(
            "POST /v1/files HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{inner}\r\n0\r\n\r\n",
            inner.len()
        );
        assert_eq!(both_lengths_at(&format!("{sized}{chunked}")), None);
        assert_eq!(both_lengths_at(&format!("{sized}{chunked}{BOTH}")), Some(2));
    }

    #[test]
    fn bytes_hyper_refuses_end_the_following() {
        let two_lengths = "POST / HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nabc";
        assert_eq!(both_lengths_at(&format!("{two_lengths}{BOTH}")), None);
        let long_value = format!("POST / HTTP/1.1\r\nContent-Length: {}\r\n\r\n", "0".repeat(2000));
        assert_eq!(both_lengths_at(&format!("{long_value}{BOTH}")), None, "a length too long to read is not guessed");
        let long_other = format!("GET / HTTP/1.1\r\nCookie: {}\r\n\r\n", "c".repeat(5000));
        assert_eq!(both_lengths_at(&format!("{long_other}{BOTH}")), Some(1), "other long lines are only skipped");
    }
}
