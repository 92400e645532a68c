//! The XML ferry reads itself: listing pages (the SDK's model has no BlobPrefix entries) and
//! error bodies; also the date formats of blob metadata.

use base64::Engine as _;
use quick_xml::events::Event;
use quick_xml::Reader;

use crate::error::{Result, StoreError};
use crate::manifest::Mtime;

#[derive(Debug, Default, Clone, PartialEq)]
pub struct BlobItem {
    pub name: String,
    pub size: u64,
    pub last_modified: Option<Mtime>,
    pub md5: Option<[u8; 16]>,
    /// User metadata, keys lowercased (they are case-insensitive): `posix::read` makes sense
    /// of it.
    pub metadata: std::collections::HashMap<String, String>,
}

#[derive(Debug, Default)]
pub struct ListPage {
    pub blobs: Vec<BlobItem>,
    pub prefixes: Vec<String>,
    pub next_marker: Option<String>,
}

fn bad(e: impl std::fmt::Display) -> StoreError {
    StoreError::Invalid(format!("unreadable XML from the service: {e}"))
}

pub fn decode_md5(b64: &str) -> Option<[u8; 16]> {
    base64::engine::general_purpose::STANDARD
        .decode(b64.trim())
        .ok()?
        .try_into()
        .ok()
}

/// RFC 3339 with optional fraction, as rclone writes `mtime` metadata and ferry does too.
pub fn parse_rfc3339(s: &str) -> Option<Mtime> {
    let s = s.trim();
    let (date, time) = s.split_once(['T', 't'])?;
    let mut d = date.split('-');
    let (y, mo, da): (i64, u32, u32) = (
        d.next()?.parse().ok()?,
        d.next()?.parse().ok()?,
        d.next()?.parse().ok()?,
    );
    let (clock, offset_secs) = if let Some(c) = time.strip_suffix(['Z', 'z']) {
        (c, 0i64)
    } else {
        let pos = time.rfind(['+', '-'])?;
        let (c, off) = time.split_at(pos);
        let sign = if off.starts_with('-') { -1 } else { 1 };
        let (oh, om) = off[1..].split_once(':')?;
        (
            c,
            sign * (oh.parse::<i64>().ok()? * 3600 + om.parse::<i64>().ok()? * 60),
        )
    };
    let (hms, frac) = clock.split_once('.').unwrap_or((clock, ""));
    let mut t = hms.split(':');
    let (h, mi, se): (i64, i64, i64) = (
        t.next()?.parse().ok()?,
        t.next()?.parse().ok()?,
        t.next()?.parse().ok()?,
    );
    // Metadata is whatever a writer put there: slice by bytes only once it is known to be digits.
    if !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let frac = &frac[..frac.len().min(9)];
    let mut nanos: u32 = if frac.is_empty() {
        0
    } else {
        frac.parse().ok()?
    };
    for _ in frac.len()..9 {
        nanos *= 10;
    }
    let days = days_from_civil(y, mo, da);
    Some(Mtime {
        secs: days * 86400 + h * 3600 + mi * 60 + se - offset_secs,
        nanos,
    })
}

pub fn format_rfc3339(m: Mtime) -> String {
    let days = m.secs.div_euclid(86400);
    let rem = m.secs.rem_euclid(86400);
    let (y, mo, d) = civil_from_days(days);
    format!(
        "{y:04}-{mo:02}-{d:02}T{:02}:{:02}:{:02}.{:09}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        m.nanos
    )
}

// Howard Hinnant's proleptic Gregorian day arithmetic.
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m as i64 + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146097 + doe - 719468
}

fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719468;
    let era = z.div_euclid(146097);
    let doe = z - era * 146097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (
        if m <= 2 {
            yoe + era * 400 + 1
        } else {
            yoe + era * 400
        },
        m,
        d,
    )
}

pub fn parse_http_date(s: &str) -> Option<Mtime> {
    httpdate::parse_http_date(s).ok().map(Mtime::from_system)
}

/// Parses one page of List Blobs.
pub fn parse_list(xml: &[u8]) -> Result<ListPage> {
    let mut r = Reader::from_reader(xml);
    let mut page = ListPage::default();
    let mut stack: Vec<String> = Vec::new();
    let mut cur = BlobItem::default();
    let mut encoded = false;
    let mut buf = Vec::new();
    loop {
        match r.read_event_into(&mut buf).map_err(bad)? {
            Event::Start(e) => {
                let name = String::from_utf8_lossy(e.local_name().as_ref()).into_owned();
                if name == "Name" {
                    encoded = e
                        .attributes()
                        .flatten()
                        .any(|a| a.key.as_ref() == b"Encoded" && a.value.as_ref() == b"true");
                }
                if name == "Blob" {
                    cur = BlobItem::default();
                }
                stack.push(name);
            }
            Event::End(_) if stack.pop().as_deref() == Some("Blob") => {
                page.blobs.push(std::mem::take(&mut cur));
            }
            Event::Text(t) => {
                let text = t.unescape().map_err(bad)?.into_owned();
                let n = stack.len();
                let leaf = stack.last().map(String::as_str).unwrap_or("");
                let parent = if n >= 2 { stack[n - 2].as_str() } else { "" };
                match (parent, leaf) {
                    ("Blob", "Name") => {
                        cur.name = if encoded {
                            percent_encoding::percent_decode_str(&text)
                                .decode_utf8()
                                .map_err(bad)?
                                .into_owned()
                        } else {
                            text
                        }
                    }
                    ("BlobPrefix", "Name") => page.prefixes.push(text),
                    ("Properties", "Content-Length") => {
                        cur.size = text.trim().parse().map_err(bad)?
                    }
                    ("Properties", "Last-Modified") => cur.last_modified = parse_http_date(&text),
                    ("Properties", "Content-MD5") => cur.md5 = decode_md5(&text),
                    ("Metadata", key) => {
                        cur.metadata.insert(key.to_ascii_lowercase(), text);
                    }
                    ("EnumerationResults", "NextMarker") if !text.is_empty() => {
                        page.next_marker = Some(text)
                    }
                    _ => {}
                }
            }
            Event::Eof => break,
            _ => {}
        }
        buf.clear();
    }
    Ok(page)
}

/// Error code and message of a failed request, where the body has them.
pub fn parse_error(xml: &[u8]) -> (Option<String>, Option<String>) {
    let mut r = Reader::from_reader(xml);
    let (mut code, mut msg) = (None, None);
    let mut leaf = String::new();
    let mut buf = Vec::new();
    while let Ok(ev) = r.read_event_into(&mut buf) {
        match ev {
            Event::Start(e) => leaf = String::from_utf8_lossy(e.local_name().as_ref()).into_owned(),
            Event::Text(t) => {
                let text = t.unescape().map(|c| c.into_owned()).unwrap_or_default();
                match leaf.as_str() {
                    "Code" => code = Some(text),
                    "Message" => msg = Some(text.lines().next().unwrap_or_default().to_string()),
                    _ => {}
                }
            }
            Event::End(_) => leaf.clear(),
            Event::Eof => break,
            _ => {}
        }
        buf.clear();
    }
    (code, msg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_page_with_metadata_and_encoded_name() {
        let xml = br#"<?xml version="1.0" encoding="utf-8"?>
<EnumerationResults ServiceEndpoint="http://x/" ContainerName="c"><Prefix>p/</Prefix><Blobs>
<Blob><Name>p/a &amp; b.txt</Name><Properties><Last-Modified>Tue, 14 Nov 2023 22:13:20 GMT</Last-Modified><Content-Length>12</Content-Length><Content-MD5>1B2M2Y8AsgTpgAmY7PhCfg==</Content-MD5></Properties>
<Metadata><mtime>2023-11-14T22:13:20.123456789Z</mtime><mode>100644</mode><Posix_Owner>7</Posix_Owner></Metadata></Blob>
<Blob><Name Encoded="true">p/%EF%BF%BE</Name><Properties><Content-Length>0</Content-Length></Properties></Blob>
<BlobPrefix><Name>p/sub/</Name></BlobPrefix>
</Blobs><NextMarker>m2</NextMarker></EnumerationResults>"#;
        let p = parse_list(xml).unwrap();
        assert_eq!(p.blobs.len(), 2);
        let a = &p.blobs[0];
        assert_eq!(a.name, "p/a & b.txt");
        assert_eq!(a.size, 12);
        assert_eq!(a.md5.unwrap()[0], 0xd4);
        assert_eq!(a.metadata["mtime"], "2023-11-14T22:13:20.123456789Z");
        assert_eq!(
            a.last_modified,
            Some(Mtime {
                secs: 1700000000,
                nanos: 0
            })
        );
        assert_eq!(a.metadata["mode"], "100644");
        assert_eq!(a.metadata["posix_owner"], "7", "keys lowercased");
        assert_eq!(p.blobs[1].name, "p/\u{fffe}");
        assert_eq!(p.prefixes, vec!["p/sub/"]);
        assert_eq!(p.next_marker.as_deref(), Some("m2"));
    }

    #[test]
    fn rfc3339_round_trip_and_offsets() {
        for m in [
            Mtime { secs: 0, nanos: 0 },
            Mtime {
                secs: 1700000000,
                nanos: 5,
            },
            Mtime {
                secs: -86401,
                nanos: 999_999_999,
            },
        ] {
            assert_eq!(parse_rfc3339(&format_rfc3339(m)), Some(m));
        }
        assert_eq!(
            parse_rfc3339("2023-11-14T23:13:20+01:00"),
            Some(Mtime {
                secs: 1700000000,
                nanos: 0
            })
        );
        assert_eq!(parse_rfc3339("nonsense"), None);
        assert_eq!(parse_rfc3339("2023-11-14T22:13:20.12345678éé"), None);
        assert_eq!(parse_rfc3339("2023-11-14T22:13:20.1+é:00"), None);
    }

    #[test]
    fn error_body() {
        let (c, m) = parse_error(b"<?xml version=\"1.0\"?><Error><Code>AuthorizationFailure</Code><Message>No.\nRequestId:1</Message></Error>");
        assert_eq!(c.as_deref(), Some("AuthorizationFailure"));
        assert_eq!(m.as_deref(), Some("No."));
    }
}
