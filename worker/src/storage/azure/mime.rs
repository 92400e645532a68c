//! The Content-Type an upload gets from its name, so a browser or a CDN serving the blob
//! treats it as what it is (azcopy and rclone guess likewise). A small table of what data
//! migrations carry; anything else is `application/octet-stream`.

pub const DEFAULT: &str = "application/octet-stream";

const BY_EXTENSION: &[(&str, &str)] = &[
    ("txt", "text/plain"),
    ("log", "text/plain"),
    ("md", "text/markdown"),
    ("csv", "text/csv"),
    ("tsv", "text/tab-separated-values"),
    ("html", "text/html"),
    ("htm", "text/html"),
    ("css", "text/css"),
    ("js", "text/javascript"),
    ("xml", "application/xml"),
    ("json", "application/json"),
    ("yaml", "application/yaml"),
    ("yml", "application/yaml"),
    ("pdf", "application/pdf"),
    ("zip", "application/zip"),
    ("gz", "application/gzip"),
    ("tgz", "application/gzip"),
    ("bz2", "application/x-bzip2"),
    ("xz", "application/x-xz"),
    ("zst", "application/zstd"),
    ("tar", "application/x-tar"),
    ("parquet", "application/vnd.apache.parquet"),
    ("png", "image/png"),
    ("jpg", "image/jpeg"),
    ("jpeg", "image/jpeg"),
    ("gif", "image/gif"),
    ("svg", "image/svg+xml"),
    ("tif", "image/tiff"),
    ("tiff", "image/tiff"),
    ("webp", "image/webp"),
    ("mp3", "audio/mpeg"),
    ("wav", "audio/wav"),
    ("mp4", "video/mp4"),
    ("webm", "video/webm"),
];

/// The type of a blob named `name`, by its extension (case-insensitive).
pub fn guess(name: &str) -> &'static str {
    let base = name.rsplit('/').next().unwrap_or(name);
    let Some((stem, ext)) = base.rsplit_once('.') else {
        return DEFAULT;
    };
    if stem.is_empty() {
        // ".bashrc" is a name, not an extension.
        return DEFAULT;
    }
    BY_EXTENSION
        .iter()
        .find(|(e, _)| e.eq_ignore_ascii_case(ext))
        .map_or(DEFAULT, |(_, t)| t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn by_extension() {
        assert_eq!(guess("d/report.PDF"), "application/pdf");
        assert_eq!(guess("a.tar.gz"), "application/gzip");
        assert_eq!(guess("notes.txt"), "text/plain");
        assert_eq!(guess("dir.d/README"), DEFAULT);
        assert_eq!(guess(".bashrc"), DEFAULT);
        assert_eq!(guess("x.unknown"), DEFAULT);
    }
}
