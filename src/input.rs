//! Files named on the command line that are read whole into memory, with a
//! size limit: a wrong path (a disk image, /dev/zero, a FIFO that never stops)
//! gets an error instead of eating the memory or running forever.

use std::io::Read;
use std::path::Path;

/// Why a file could not be read whole.
#[derive(Debug)]
pub enum ReadError {
    /// It could not be opened or read.
    Io(std::io::Error),
    /// It holds more than the limit (only the limit and one byte were read).
    TooLarge,
}

/// Reads `path` to its end, at most `limit` bytes.
pub fn read_bounded(path: &Path, limit: u64) -> Result<Vec<u8>, ReadError> {
    let f = std::fs::File::open(path).map_err(ReadError::Io)?;
    let mut buf = Vec::new();
    f.take(limit.saturating_add(1)).read_to_end(&mut buf).map_err(ReadError::Io)?;
    if buf.len() as u64 > limit {
        return Err(ReadError::TooLarge);
    }
    Ok(buf)
}

/// `64 MiB`.
pub fn size_words(bytes: u64) -> String {
    format!("{} MiB", bytes >> 20)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endless_and_large_inputs_stop_at_the_limit() {
        assert!(matches!(read_bounded(Path::new("/dev/zero"), 1 << 20), Err(ReadError::TooLarge)));
        assert!(matches!(read_bounded(Path::new("/nonexistent/x"), 10), Err(ReadError::Io(_))));
        assert_eq!(read_bounded(Path::new("/dev/null"), 0).unwrap().len(), 0);
    }
}
