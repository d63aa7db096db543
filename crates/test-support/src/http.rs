//! Plain HTTP/1.1 GETs of the guard's endpoints over a TCP stream: no client library between
//! the test and what the guard actually sends (status line, chunked body).

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::wait::PATIENCE;

/// `GET path` on `addr`: (status, body); panics with what went wrong, or after [`PATIENCE`].
pub async fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    try_get(addr, path, PATIENCE)
        .await
        .unwrap_or_else(|e| panic!("GET {path} on {addr}: {e}"))
}

/// `GET path` on `addr` within `timeout`: (status, body), or what went wrong.
pub async fn try_get(
    addr: SocketAddr,
    path: &str,
    timeout: Duration,
) -> Result<(u16, String), String> {
    let exchange = async {
        let mut stream = TcpStream::connect(addr)
            .await
            .map_err(|e| format!("connect {addr}: {e}"))?;
        let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
        stream
            .write_all(request.as_bytes())
            .await
            .map_err(|e| format!("write: {e}"))?;
        let mut raw = Vec::new();
        stream
            .read_to_end(&mut raw)
            .await
            .map_err(|e| format!("read: {e}"))?;
        Ok::<_, String>(String::from_utf8_lossy(&raw).into_owned())
    };
    let text = tokio::time::timeout(timeout, exchange)
        .await
        .map_err(|_| format!("GET {path} on {addr}: no answer within {timeout:?}"))??;
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("no header end in {text:?}"))?;
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("no status in {head:?}"))?;
    let chunked = head.lines().any(|l| {
        let l = l.to_ascii_lowercase();
        l.starts_with("transfer-encoding:") && l.contains("chunked")
    });
    let body = if chunked {
        dechunk(body)?
    } else {
        body.to_owned()
    };
    Ok((status, body))
}

/// Decode a chunked HTTP/1.1 body.
fn dechunk(mut rest: &str) -> Result<String, String> {
    let mut out = String::new();
    while let Some((size_line, tail)) = rest.split_once("\r\n") {
        let size_text = size_line.split(';').next().unwrap_or("").trim();
        let size = usize::from_str_radix(size_text, 16)
            .map_err(|_| format!("bad chunk size {size_line:?}"))?;
        if size == 0 {
            return Ok(out);
        }
        let chunk = tail
            .get(..size)
            .ok_or_else(|| format!("chunk of {size} bytes cut short: {tail:?}"))?;
        out.push_str(chunk);
        rest = tail[size..].trim_start_matches("\r\n");
    }
    Err(format!("chunked body without its last chunk; got {out:?}"))
}

#[cfg(test)]
mod tests {
    use super::dechunk;

    #[test]
    fn dechunks_and_rejects_broken_bodies() {
        assert_eq!(
            dechunk("3\r\nabc\r\n2;x=y\r\nde\r\n0\r\n\r\n").unwrap(),
            "abcde"
        );
        assert!(dechunk("z\r\nabc\r\n0\r\n\r\n").is_err());
        assert!(dechunk("9\r\nabc\r\n").is_err());
        assert!(dechunk("3\r\nabc\r\n").is_err());
    }
}
