//! Where data lives: a local path or an Azure Blob container + prefix.

use std::path::PathBuf;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Location {
    Local(PathBuf),
    Blob(BlobLocation),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlobLocation {
    /// Scheme + host (+ `/account` for path-style endpoints), no trailing slash.
    pub endpoint: String,
    pub account: String,
    pub container: String,
    /// Blob name prefix as given (no leading slash; may be empty).
    pub prefix: String,
    /// SAS token from the URL's query string, without the `?`.
    pub sas: Option<String>,
}

impl BlobLocation {
    /// A printable URL that never includes the SAS.
    pub fn display(&self) -> String {
        if self.prefix.is_empty() {
            format!("{}/{}", self.endpoint, self.container)
        } else {
            format!("{}/{}/{}", self.endpoint, self.container, self.prefix)
        }
    }
}

impl std::fmt::Display for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Location::Local(p) => write!(f, "{}", p.display()),
            Location::Blob(b) => write!(f, "{}", b.display()),
        }
    }
}

fn percent_decode(s: &str) -> Result<String, String> {
    percent_encoding::percent_decode_str(s)
        .decode_utf8()
        .map(|c| c.into_owned())
        .map_err(|_| format!("URL path is not valid UTF-8 after decoding: {s:?}"))
}

fn is_ip_or_localhost(host: &str) -> bool {
    let bare = host
        .rsplit_once(':')
        .map(|(h, p)| {
            if p.chars().all(|c| c.is_ascii_digit()) {
                h
            } else {
                host
            }
        })
        .unwrap_or(host);
    let bare = bare.trim_start_matches('[').trim_end_matches(']');
    bare == "localhost" || bare.parse::<std::net::IpAddr>().is_ok()
}

/// The argument as messages may show it: a query string (a SAS) is replaced, never printed.
pub fn shown(arg: &str) -> String {
    match arg.split_once('?') {
        Some((before, _)) => format!("{before}?<query hidden>"),
        None => arg.to_string(),
    }
}

/// Reads a location argument. `env` gives `AZURE_STORAGE_ACCOUNT` and
/// `AZURE_STORAGE_BLOB_ENDPOINT` for `az://` locations. Error messages never hold the SAS.
pub fn parse(arg: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<Location, String> {
    parse_inner(arg, &shown(arg), env)
}

fn parse_inner(
    raw: &str,
    arg: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Location, String> {
    if let Some(rest) = raw.strip_prefix("az://") {
        let (container, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        let (prefix, sas) = split_query(prefix);
        let (container, sas2) = split_query(container);
        let account = env("AZURE_STORAGE_ACCOUNT").filter(|a| !a.is_empty());
        let endpoint_env = env("AZURE_STORAGE_BLOB_ENDPOINT").filter(|e| !e.is_empty());
        let (endpoint, account) = match (endpoint_env, account) {
            (Some(ep), acct) => {
                let ep = ep.trim_end_matches('/').to_string();
                let acct = match acct {
                    Some(a) => a,
                    None => account_from_endpoint(&ep).ok_or_else(|| {
                        format!("{arg}: set AZURE_STORAGE_ACCOUNT (cannot tell the account from AZURE_STORAGE_BLOB_ENDPOINT={ep})")
                    })?,
                };
                (ep, acct)
            }
            (None, Some(a)) => (format!("https://{a}.blob.core.windows.net"), a),
            (None, None) => return Err(format!("{arg}: az:// locations need AZURE_STORAGE_ACCOUNT (or AZURE_STORAGE_BLOB_ENDPOINT)")),
        };
        return blob(endpoint, account, container, prefix, sas.or(sas2), arg);
    }
    if let Some((scheme, rest)) = raw.split_once("://") {
        if scheme != "http" && scheme != "https" {
            return Err(format!("{arg}: unsupported scheme {scheme:?} (use a local path, https://, http:// or az://)"));
        }
        let (hostpart, path) = rest.split_once('/').unwrap_or((rest, ""));
        let (host, sas_on_host) = split_query(hostpart);
        let (path, sas) = split_query(path);
        let sas = sas.or(sas_on_host);
        if host.is_empty() {
            return Err(format!("{arg}: missing host"));
        }
        if is_ip_or_localhost(host) {
            // Emulator style: http://127.0.0.1:10000/<account>/<container>/<prefix>
            let mut parts = path.splitn(3, '/');
            let account = parts.next().unwrap_or_default();
            let container = parts.next().unwrap_or_default();
            let prefix = parts.next().unwrap_or_default();
            if account.is_empty() {
                return Err(format!(
                    "{arg}: path-style URL needs /<account>/<container>"
                ));
            }
            return blob(
                format!("{scheme}://{host}/{account}"),
                account.into(),
                container,
                prefix,
                sas,
                arg,
            );
        }
        let account = host.split('.').next().unwrap_or_default().to_string();
        let (container, prefix) = path.split_once('/').unwrap_or((path, ""));
        return blob(
            format!("{scheme}://{host}"),
            account,
            container,
            prefix,
            sas,
            arg,
        );
    }
    if raw.is_empty() {
        return Err("empty location".into());
    }
    Ok(Location::Local(PathBuf::from(raw)))
}

fn account_from_endpoint(ep: &str) -> Option<String> {
    let rest = ep.split_once("://")?.1;
    let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
    if is_ip_or_localhost(host) {
        path.split('/')
            .next()
            .filter(|a| !a.is_empty())
            .map(str::to_string)
    } else {
        host.split('.').next().map(str::to_string)
    }
}

fn split_query(s: &str) -> (&str, Option<String>) {
    match s.split_once('?') {
        Some((p, q)) if !q.is_empty() => (p, Some(q.to_string())),
        Some((p, _)) => (p, None),
        None => (s, None),
    }
}

fn blob(
    endpoint: String,
    account: String,
    container: &str,
    prefix: &str,
    sas: Option<String>,
    arg: &str,
) -> Result<Location, String> {
    let container = percent_decode(container).map_err(|e| format!("{arg}: {e}"))?;
    if container.is_empty() {
        return Err(format!("{arg}: missing container name"));
    }
    let valid = container.len() >= 3
        && container.len() <= 63
        && container
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !container.starts_with('-')
        && !container.ends_with('-')
        && !container.contains("--");
    if !valid && container != "$root" && container != "$web" {
        return Err(format!(
            "{arg}: invalid container name {container:?}: Azure takes 3 to 63 lowercase letters, \
             digits and single hyphens, beginning and ending with a letter or digit"
        ));
    }
    Ok(Location::Blob(BlobLocation {
        endpoint,
        account,
        container,
        prefix: percent_decode(prefix).map_err(|e| format!("{arg}: {e}"))?,
        sas,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn noenv(_: &str) -> Option<String> {
        None
    }

    fn b(arg: &str) -> BlobLocation {
        match parse(arg, &noenv).unwrap() {
            Location::Blob(b) => b,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn azure_host_style() {
        let l = b("https://acct.blob.core.windows.net/ctr/some/prefix");
        assert_eq!(l.endpoint, "https://acct.blob.core.windows.net");
        assert_eq!(l.account, "acct");
        assert_eq!(l.container, "ctr");
        assert_eq!(l.prefix, "some/prefix");
        assert_eq!(l.sas, None);
    }

    #[test]
    fn sas_is_kept_apart_and_never_displayed() {
        let l = b("https://acct.blob.core.windows.net/ctr/p?sv=2024&sig=SECRET");
        assert_eq!(l.sas.as_deref(), Some("sv=2024&sig=SECRET"));
        assert!(!l.display().contains("SECRET"));
        let l = b("https://acct.blob.core.windows.net/ctr?sv=1&sig=x");
        assert_eq!(l.container, "ctr");
        assert_eq!(l.sas.as_deref(), Some("sv=1&sig=x"));
    }

    #[test]
    fn errors_never_print_the_sas() {
        for arg in [
            "https://acct.blob.core.windows.net/Bad_Name?sv=1&sig=SECRET",
            "https://acct.blob.core.windows.net/?sv=1&sig=SECRET",
            "http://127.0.0.1:1/?sv=1&sig=SECRET",
            "az://Bad_Name/x?sv=1&sig=SECRET",
            "ftp://x/y?sig=SECRET",
            "https://acct.blob.core.windows.net/ctr/%ff?sig=SECRET",
        ] {
            let err = parse(arg, &noenv).unwrap_err();
            assert!(
                !err.contains("SECRET") && err.contains("query hidden"),
                "{err}"
            );
        }
    }

    #[test]
    fn emulator_path_style() {
        let l = b("http://127.0.0.1:10000/devstoreaccount1/data/a%20b/c");
        assert_eq!(l.endpoint, "http://127.0.0.1:10000/devstoreaccount1");
        assert_eq!(l.account, "devstoreaccount1");
        assert_eq!(l.prefix, "a b/c");
        let l = b("http://localhost:1234/acct/ctr");
        assert_eq!(l.prefix, "");
        let l = b("http://[::1]:1234/acct/ctr/x");
        assert_eq!(l.endpoint, "http://[::1]:1234/acct");
    }

    #[test]
    fn az_scheme_uses_environment() {
        let env = |k: &str| match k {
            "AZURE_STORAGE_ACCOUNT" => Some("myacct".to_string()),
            _ => None,
        };
        let Location::Blob(l) = parse("az://ctr/x/y", &env).unwrap() else {
            panic!()
        };
        assert_eq!(l.endpoint, "https://myacct.blob.core.windows.net");
        assert_eq!(l.prefix, "x/y");
        let env = |k: &str| match k {
            "AZURE_STORAGE_BLOB_ENDPOINT" => {
                Some("http://127.0.0.1:9/devstoreaccount1/".to_string())
            }
            _ => None,
        };
        let Location::Blob(l) = parse("az://ctr", &env).unwrap() else {
            panic!()
        };
        assert_eq!(l.account, "devstoreaccount1");
        assert_eq!(l.endpoint, "http://127.0.0.1:9/devstoreaccount1");
        assert!(parse("az://ctr", &noenv)
            .unwrap_err()
            .contains("AZURE_STORAGE_ACCOUNT"));
    }

    #[test]
    fn bad_input_is_explained() {
        assert!(parse("ftp://x/y", &noenv)
            .unwrap_err()
            .contains("unsupported scheme"));
        assert!(parse("https://acct.blob.core.windows.net/", &noenv)
            .unwrap_err()
            .contains("missing container"));
        assert!(parse("https://acct.blob.core.windows.net/Bad_Name", &noenv)
            .unwrap_err()
            .contains("invalid container"));
        assert!(parse("", &noenv).is_err());
        for bad in ["nf", "ab-", "-ab", "a--b", "Abc", &"a".repeat(64)] {
            let err = parse(&format!("http://127.0.0.1:1/acct/{bad}"), &noenv).unwrap_err();
            assert!(err.contains("invalid container name"), "{bad}: {err}");
        }
        for good in ["abc", "a-b-c", "0ab", &"a".repeat(63)] {
            assert!(parse(&format!("http://127.0.0.1:1/acct/{good}"), &noenv).is_ok());
        }
        assert_eq!(
            parse("./dir", &noenv).unwrap(),
            Location::Local("./dir".into())
        );
    }
}
