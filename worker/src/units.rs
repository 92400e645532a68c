//! Human-friendly sizes and rates on the command line.

fn split_number(s: &str) -> Result<(f64, &str), String> {
    let s = s.trim();
    let end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let n: f64 = s[..end]
        .parse()
        .map_err(|_| format!("not a number: {s:?}"))?;
    Ok((n, s[end..].trim()))
}

/// `4MiB`, `8M` (binary, as most storage tools read it), `1G`, `512k`, plain bytes.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let (n, unit) = split_number(s)?;
    let mult: f64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kib" | "ki" => 1024.0,
        "m" | "mib" | "mi" => 1024.0 * 1024.0,
        "g" | "gib" | "gi" => 1024.0f64.powi(3),
        "t" | "tib" | "ti" => 1024.0f64.powi(4),
        "kb" => 1e3,
        "mb" => 1e6,
        "gb" => 1e9,
        "tb" => 1e12,
        _ => {
            return Err(format!(
                "unknown size unit in {s:?} (use B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)"
            ))
        }
    };
    Ok((n * mult).round() as u64)
}

/// A rate in bytes per second. `Gbps`/`Mbps`/`Kbps`/`bps` are bits (decimal); `MB/s` decimal
/// bytes; `MiB/s` binary bytes; the `/s` is optional; a bare number is bytes per second.
pub fn parse_rate(s: &str) -> Result<u64, String> {
    let (n, unit) = split_number(s)?;
    let unit = unit.strip_suffix("/s").unwrap_or(unit);
    let bytes_per_sec: f64 = match unit {
        "" | "B" => n,
        "bps" => n / 8.0,
        "Kbps" | "kbps" => n * 1e3 / 8.0,
        "Mbps" => n * 1e6 / 8.0,
        "Gbps" => n * 1e9 / 8.0,
        "Tbps" => n * 1e12 / 8.0,
        "KB" | "kB" => n * 1e3,
        "MB" => n * 1e6,
        "GB" => n * 1e9,
        "TB" => n * 1e12,
        "KiB" => n * 1024.0,
        "MiB" => n * 1024.0 * 1024.0,
        "GiB" => n * 1024.0f64.powi(3),
        "TiB" => n * 1024.0f64.powi(4),
        _ => {
            return Err(format!(
                "unknown rate unit in {s:?} (e.g. 500Mbps, 100MB/s, 64MiB/s)"
            ))
        }
    };
    if bytes_per_sec < 1.0 {
        return Err(format!("rate {s:?} is below one byte per second"));
    }
    Ok(bytes_per_sec as u64)
}

pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut i = 0;
    while v >= 1024.0 && i < UNITS.len() - 1 {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[i])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4MiB").unwrap(), 4 << 20);
        assert_eq!(parse_size("8M").unwrap(), 8 << 20);
        assert_eq!(parse_size("1000").unwrap(), 1000);
        assert_eq!(parse_size("1.5k").unwrap(), 1536);
        assert_eq!(parse_size("2GB").unwrap(), 2_000_000_000);
        assert!(parse_size("3 furlongs").is_err());
        assert!(parse_size("MiB").is_err());
    }

    #[test]
    fn rates_bits_and_bytes() {
        assert_eq!(parse_rate("8Mbps").unwrap(), 1_000_000);
        assert_eq!(parse_rate("1Gbps").unwrap(), 125_000_000);
        assert_eq!(parse_rate("100MB/s").unwrap(), 100_000_000);
        assert_eq!(parse_rate("64MiB/s").unwrap(), 64 << 20);
        assert_eq!(parse_rate("64MiB").unwrap(), 64 << 20);
        assert_eq!(parse_rate("5000").unwrap(), 5000);
        assert!(parse_rate("4bps").is_err());
        assert!(parse_rate("10 parsecs").is_err());
    }
}
