//! A subset of tcpdump's filter language, applied to decoded segments:
//! `[src|dst] host ADDR`, `[src|dst] net ADDR/LEN`, `[src|dst] port N`,
//! `[src|dst] portrange N-M`, `tcp`, `ip`, `ip6`, `and`/`&&`, `or`/`||`,
//! `not`/`!`, parentheses. As in tcpdump, a bare value repeats the previous
//! qualifier: `port 80 or 8080`.

use crate::wire::Segment;
use std::net::IpAddr;

/// Which address or port of a segment a primitive looks at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Dir {
    Src,
    Dst,
    Either,
    Both,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Host,
    Net,
    Port,
    PortRange,
}

/// The parsed expression (also compiled to classic BPF by `capture::live`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Expr {
    True,
    False,
    V4,
    V6,
    Net(Dir, IpAddr, u8),
    Ports(Dir, u16, u16),
    Not(Box<Expr>),
    And(Box<Expr>, Box<Expr>),
    Or(Box<Expr>, Box<Expr>),
}

/// A compiled filter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Filter {
    expr: Expr,
}

const HELP: &str = "supported: [src|dst] host ADDR, [src|dst] net ADDR/LEN, [src|dst] port N, portrange N-M, tcp, ip, ip6, and, or, not, ( )";

/// Deepest nesting of `(` and `not` accepted. The parser, the matcher and
/// the BPF compiler recurse on nesting; a bound keeps a hostile filter from
/// overflowing the stack (tcpdump's own grammar stops far below stack depth too).
pub const MAX_DEPTH: usize = 64;
/// Most words in a filter: far beyond what the kernel's 4096 BPF
/// instructions can hold, small enough to parse at once.
pub const MAX_WORDS: usize = 10_000;

impl Filter {
    /// Parses a filter expression; the error names the offending word.
    pub fn parse(text: &str) -> Result<Filter, String> {
        let spaced = text
            .replace('(', " ( ")
            .replace(')', " ) ")
            .replace("&&", " and ")
            .replace("||", " or ")
            .replace('!', " not ");
        let words: Vec<&str> = spaced.split_whitespace().collect();
        if words.is_empty() {
            return Err(format!("empty filter; {HELP}"));
        }
        if words.len() > MAX_WORDS {
            return Err(format!("the filter has {} words, more than {MAX_WORDS}; shorten it", words.len()));
        }
        let mut p = Parser { w: &words, i: 0, last: None, depth: 0 };
        let expr = p.or()?;
        if p.i < words.len() {
            return Err(format!("unexpected '{}' at word {}; {HELP}", words[p.i], p.i + 1));
        }
        Ok(Filter { expr })
    }

    /// The parsed expression.
    pub(crate) fn expr(&self) -> &Expr {
        &self.expr
    }

    /// Whether a segment passes.
    #[inline]
    pub fn matches(&self, s: &Segment<'_>) -> bool {
        eval(&self.expr, s)
    }
}

fn in_net(a: IpAddr, net: IpAddr, len: u8) -> bool {
    match (a, net) {
        (IpAddr::V4(a), IpAddr::V4(n)) => {
            let m = if len == 0 { 0 } else { u32::MAX << (32 - u32::from(len)) };
            u32::from(a) & m == u32::from(n) & m
        }
        (IpAddr::V6(a), IpAddr::V6(n)) => {
            let m = if len == 0 { 0 } else { u128::MAX << (128 - u32::from(len)) };
            u128::from(a) & m == u128::from(n) & m
        }
        _ => false,
    }
}

fn dir_match<T: Copy>(d: Dir, src: T, dst: T, f: impl Fn(T) -> bool) -> bool {
    match d {
        Dir::Src => f(src),
        Dir::Dst => f(dst),
        Dir::Either => f(src) || f(dst),
        Dir::Both => f(src) && f(dst),
    }
}

fn eval(e: &Expr, s: &Segment<'_>) -> bool {
    match e {
        Expr::True => true,
        Expr::False => false,
        Expr::V4 => s.src.ip.is_ipv4(),
        Expr::V6 => s.src.ip.is_ipv6(),
        Expr::Net(d, net, len) => dir_match(*d, s.src.ip, s.dst.ip, |a| in_net(a, *net, *len)),
        Expr::Ports(d, lo, hi) => dir_match(*d, s.src.port, s.dst.port, |p| (*lo..=*hi).contains(&p)),
        Expr::Not(x) => !eval(x, s),
        Expr::And(a, b) => eval(a, s) && eval(b, s),
        Expr::Or(a, b) => eval(a, s) || eval(b, s),
    }
}

struct Parser<'a> {
    w: &'a [&'a str],
    i: usize,
    last: Option<(Dir, Kind)>,
    /// Nesting of `(` and `not` at the current word.
    depth: usize,
}

/// Joins `terms` with `op` as a balanced tree: a chain of N terms nests
/// log2(N) deep instead of N, so matching and compiling stay shallow.
fn balanced(mut terms: Vec<Expr>, op: fn(Box<Expr>, Box<Expr>) -> Expr) -> Expr {
    while terms.len() > 1 {
        let mut next = Vec::with_capacity(terms.len().div_ceil(2));
        let mut it = terms.into_iter();
        while let Some(a) = it.next() {
            next.push(match it.next() {
                Some(b) => op(Box::new(a), Box::new(b)),
                None => a,
            });
        }
        terms = next;
    }
    terms.pop().unwrap_or(Expr::True)
}

impl<'a> Parser<'a> {
    fn peek(&self) -> Option<&'a str> {
        self.w.get(self.i).copied()
    }
    fn eat(&mut self, word: &str) -> bool {
        if self.peek() == Some(word) {
            self.i += 1;
            true
        } else {
            false
        }
    }
    fn or(&mut self) -> Result<Expr, String> {
        let mut terms = vec![self.and()?];
        while self.eat("or") {
            terms.push(self.and()?);
        }
        Ok(balanced(terms, Expr::Or))
    }
    fn and(&mut self) -> Result<Expr, String> {
        let mut terms = vec![self.not()?];
        while self.eat("and") {
            terms.push(self.not()?);
        }
        Ok(balanced(terms, Expr::And))
    }
    /// Enters one more level of `(` or `not`, or refuses past [`MAX_DEPTH`].
    fn deeper(&mut self) -> Result<(), String> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(format!(
                "the filter nests parentheses and 'not' more than {MAX_DEPTH} deep (at word {}); simplify it",
                self.i
            ));
        }
        Ok(())
    }
    fn not(&mut self) -> Result<Expr, String> {
        // A run of `not`s is counted, not recursed into: `!!!!x` is x or not x.
        let mut nots = 0usize;
        while self.eat("not") {
            nots += 1;
            self.deeper()?;
        }
        let e = self.primary();
        self.depth -= nots;
        Ok(if nots % 2 == 1 { Expr::Not(Box::new(e?)) } else { e? })
    }
    fn primary(&mut self) -> Result<Expr, String> {
        let Some(w) = self.peek() else {
            return Err(format!("filter ends too early; {HELP}"));
        };
        if self.eat("(") {
            self.deeper()?;
            let e = self.or()?;
            if !self.eat(")") {
                return Err(format!("missing ')' in filter; {HELP}"));
            }
            self.depth -= 1;
            return Ok(e);
        }
        let proto = match w {
            "tcp" => Some(Expr::True),
            "udp" | "icmp" | "icmp6" | "arp" | "sctp" => Some(Expr::False),
            "ip" => Some(Expr::V4),
            "ip6" => Some(Expr::V6),
            _ => None,
        };
        if let Some(p) = proto {
            self.i += 1;
            // "tcp port 80" means "tcp and port 80".
            return match self.peek() {
                Some("src" | "dst" | "host" | "net" | "port" | "portrange") => {
                    Ok(Expr::And(Box::new(p), Box::new(self.primitive()?)))
                }
                _ => Ok(p),
            };
        }
        self.primitive()
    }
    fn primitive(&mut self) -> Result<Expr, String> {
        let start = self.i;
        let mut dir = None;
        if self.eat("src") {
            dir = Some(Dir::Src);
        } else if self.eat("dst") {
            dir = Some(Dir::Dst);
        }
        if dir.is_some() {
            // "src or dst port 80", "src and dst host x"
            let save = self.i;
            if self.eat("or") && self.eat(if dir == Some(Dir::Src) { "dst" } else { "src" }) {
                dir = Some(Dir::Either);
            } else {
                self.i = save;
                if self.eat("and") && self.eat(if dir == Some(Dir::Src) { "dst" } else { "src" }) {
                    dir = Some(Dir::Both);
                } else {
                    self.i = save;
                }
            }
        }
        let kind = match self.peek() {
            Some("host") => Some(Kind::Host),
            Some("net") => Some(Kind::Net),
            Some("port") => Some(Kind::Port),
            Some("portrange") => Some(Kind::PortRange),
            _ => None,
        };
        let (dir, kind) = match (dir, kind) {
            (d, Some(k)) => {
                self.i += 1;
                (d.unwrap_or(Dir::Either), k)
            }
            (Some(d), None) => (d, Kind::Host),
            (None, None) => match self.last {
                // A bare value repeats the previous qualifier.
                Some(q) if self.i > 0 => q,
                _ => {
                    let w = self.peek().unwrap_or("");
                    return Err(format!("unexpected '{w}' at word {}; {HELP}", start + 1));
                }
            },
        };
        self.last = Some((dir, kind));
        let Some(v) = self.peek() else {
            return Err(format!("filter ends before a value; {HELP}"));
        };
        self.i += 1;
        let bad = |what: &str| format!("'{v}' is not {what} (word {}); {HELP}", self.i);
        Ok(match kind {
            Kind::Host => {
                let a: IpAddr = v.parse().map_err(|_| bad("an IP address (host names are not resolved)"))?;
                Expr::Net(dir, a, if a.is_ipv4() { 32 } else { 128 })
            }
            Kind::Net => {
                let (a, len) = v.split_once('/').unwrap_or((v, ""));
                let a: IpAddr = a.parse().map_err(|_| bad("a network like 10.0.0.0/8"))?;
                let max = if a.is_ipv4() { 32 } else { 128 };
                let len = if len.is_empty() { max } else { len.parse().map_err(|_| bad("a prefix length"))? };
                if len > max {
                    return Err(bad("a valid prefix length"));
                }
                Expr::Net(dir, a, len)
            }
            Kind::Port => {
                let p: u16 = v.parse().map_err(|_| bad("a port number"))?;
                Expr::Ports(dir, p, p)
            }
            Kind::PortRange => {
                let (a, b) = v.split_once('-').ok_or_else(|| bad("a range like 8000-8100"))?;
                let (a, b): (u16, u16) =
                    (a.parse().map_err(|_| bad("a port range"))?, b.parse().map_err(|_| bad("a port range"))?);
                Expr::Ports(dir, a.min(b), a.max(b))
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{Endpoint, Flags, TcpOptions};

    fn seg(src: &str, sport: u16, dst: &str, dport: u16) -> Segment<'static> {
        Segment {
            frame: 1,
            ts_ns: 0,
            src: Endpoint { ip: src.parse().unwrap(), port: sport },
            dst: Endpoint { ip: dst.parse().unwrap(), port: dport },
            seq: 0,
            ack: 0,
            flags: Flags(0),
            window: 0,
            len: 0,
            options: TcpOptions::default(),
            payload: &[],
            ip_id: None,
            tcp_options: &[],
        }
    }

    fn m(f: &str, s: &Segment<'_>) -> bool {
        Filter::parse(f).unwrap().matches(s)
    }

    #[test]
    fn tcpdump_expressions() {
        let s = seg("127.0.0.1", 40000, "10.1.2.3", 8080);
        assert!(m("tcp port 8080", &s));
        assert!(m("port 80 or 8080", &s));
        assert!(!m("src port 8080", &s));
        assert!(m("dst port 8080 and src host 127.0.0.1", &s));
        assert!(m("net 10.0.0.0/8 && !port 22", &s));
        assert!(!m("not (host 10.1.2.3 or port 1)", &s));
        assert!(m("portrange 8000-8100", &s));
        assert!(m("ip and not ip6", &s));
        assert!(!m("udp", &s));
        assert!(m("src or dst host 10.1.2.3", &s));
        assert!(!m("src and dst host 10.1.2.3", &s));
        assert!(m("host ::1 or tcp", &s));
    }

    #[test]
    fn errors_name_the_word() {
        let e = Filter::parse("port http").unwrap_err();
        assert!(e.contains("'http' is not a port number"), "{e}");
        let e = Filter::parse("tcp bogus 1").unwrap_err();
        assert!(e.contains("unexpected 'bogus' at word 2"), "{e}");
        assert!(Filter::parse("(port 1").unwrap_err().contains("missing ')'"));
        assert!(Filter::parse("").is_err());
        assert!(Filter::parse("host example.com").unwrap_err().contains("not resolved"));
    }

    /// Depth of the parsed tree.
    fn depth(e: &Expr) -> usize {
        match e {
            Expr::Not(x) => 1 + depth(x),
            Expr::And(a, b) | Expr::Or(a, b) => 1 + depth(a).max(depth(b)),
            _ => 1,
        }
    }

    #[test]
    fn hostile_nesting_is_refused_in_one_line() {
        // The inputs: refused by size before any recursion.
        let parens = format!("{}port 80{}", "(".repeat(15_000), ")".repeat(15_000));
        let e = Filter::parse(&parens).unwrap_err();
        assert!(e.contains("more than 10000") && !e.contains('\n'), "{e}");
        let nots = format!("{}port 80", "!".repeat(120_000));
        assert!(Filter::parse(&nots).unwrap_err().contains("more than 10000"));
        // Within the size bound, by depth.
        let parens = format!("{}port 80{}", "(".repeat(1000), ")".repeat(1000));
        let e = Filter::parse(&parens).unwrap_err();
        assert!(e.contains("more than 64 deep") && !e.contains('\n'), "{e}");
        let nots = format!("{}port 80", "!".repeat(1000));
        assert!(Filter::parse(&nots).unwrap_err().contains("more than 64 deep"));
        let long = vec!["port 1"; MAX_WORDS].join(" or ");
        assert!(Filter::parse(&long).unwrap_err().contains("more than 10000"));
        // At the bound itself it still parses.
        let ok = format!("{}port 80{}", "(".repeat(MAX_DEPTH), ")".repeat(MAX_DEPTH));
        assert!(m(&ok, &seg("10.0.0.1", 80, "10.0.0.2", 1)));
    }

    #[test]
    fn nots_fold_and_chains_stay_shallow() {
        let s = seg("127.0.0.1", 40000, "10.1.2.3", 8080);
        assert!(m("! ! port 8080", &s) && !m("! ! ! port 8080", &s) && m("not not not port 1", &s));
        // 3000 alternatives: a balanced tree, not a 3000-deep chain.
        let text = (1..=3000).map(|p| format!("port {p}")).collect::<Vec<_>>().join(" or ");
        let f = Filter::parse(&text).unwrap();
        assert!(depth(f.expr()) <= 13, "depth {}", depth(f.expr()));
        assert!(f.matches(&s) == (8080 <= 3000) && f.matches(&seg("1.1.1.1", 2999, "2.2.2.2", 5)));
        let all = (1..=200).map(|p| format!("not port {p}")).collect::<Vec<_>>().join(" and ");
        assert!(Filter::parse(&all).unwrap().matches(&s));
        assert!(!Filter::parse(&all).unwrap().matches(&seg("1.1.1.1", 200, "2.2.2.2", 5)));
    }
}
