//! Text as Python writes it, for prompts whose references build them in Python: `num2words`,
//! `str(timedelta)`, `str(float)`. Shared by the families whose processors use them (Apollo,
//! SmolVLM2).

use std::fmt::Write as _;

const ONES: [&str; 20] = [
    "zero",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
    "thirteen",
    "fourteen",
    "fifteen",
    "sixteen",
    "seventeen",
    "eighteen",
    "nineteen",
];
const TENS: [&str; 10] = [
    "", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety",
];
const SCALES: [(u64, &str); 6] = [
    (1_000_000_000_000_000_000, "quintillion"),
    (1_000_000_000_000_000, "quadrillion"),
    (1_000_000_000_000, "trillion"),
    (1_000_000_000, "billion"),
    (1_000_000, "million"),
    (1_000, "thousand"),
];

/// English cardinal words as Python's `num2words(n)` writes them: "sixty-six", "six hundred and
/// sixty-six", "one thousand and one", "one thousand, one hundred".
pub fn number_words(n: u64) -> String {
    if n < 20 {
        return ONES[n as usize].to_owned();
    }
    if n < 100 {
        let (t, u) = (n / 10, n % 10);
        return if u == 0 {
            TENS[t as usize].to_owned()
        } else {
            format!("{}-{}", TENS[t as usize], ONES[u as usize])
        };
    }
    if n < 1000 {
        let (h, rest) = (n / 100, n % 100);
        let head = format!("{} hundred", ONES[h as usize]);
        return if rest == 0 {
            head
        } else {
            format!("{head} and {}", number_words(rest))
        };
    }
    for (scale, name) in SCALES {
        if n >= scale {
            let (q, rest) = (n / scale, n % scale);
            let head = format!("{} {name}", number_words(q));
            // num2words' merge: "and" before a remainder under 100, a comma otherwise.
            return match rest {
                0 => head,
                1..100 => format!("{head} and {}", number_words(rest)),
                _ => format!("{head}, {}", number_words(rest)),
            };
        }
    }
    unreachable!("every n >= 1000 has a scale")
}

/// Python's `str(timedelta(seconds=secs))`: `H:MM:SS`, `.ffffff` when there are microseconds
/// (rounded half to even), `N day(s), ` in front past 24 hours. `secs` must be finite and >= 0.
pub fn timedelta_str(secs: f64) -> String {
    let micros = (secs * 1e6).round_ties_even().max(0.0) as u64;
    let (days, rem) = (micros / 86_400_000_000, micros % 86_400_000_000);
    let (s, us) = (rem / 1_000_000, rem % 1_000_000);
    let mut out = String::new();
    if days > 0 {
        let _ = write!(out, "{days} day{}, ", if days == 1 { "" } else { "s" });
    }
    let _ = write!(out, "{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60);
    if us > 0 {
        let _ = write!(out, ".{us:06}");
    }
    out
}

/// Python's `str(x)` for a float in the ordinary range: shortest round-trip digits, `.0` on whole
/// numbers (`2.0`, `1.5`). Python switches to exponent form below 1e-4 and from 1e16; so does this.
pub fn py_float_str(x: f64) -> String {
    if !x.is_finite() {
        return if x.is_nan() {
            "nan".into()
        } else if x > 0.0 {
            "inf".into()
        } else {
            "-inf".into()
        };
    }
    let a = x.abs();
    if a != 0.0 && !(1e-4..1e16).contains(&a) {
        // Rust writes `1e16` / `1e-5`; Python writes `1e+16` / `1e-05`.
        let s = format!("{x:e}");
        let (mantissa, exp) = s.split_once('e').unwrap_or((&s, "0"));
        let (sign, digits) = match exp.strip_prefix('-') {
            Some(d) => ('-', d),
            None => ('+', exp),
        };
        return format!("{mantissa}e{sign}{digits:0>2}");
    }
    let s = format!("{x}");
    if s.contains('.') { s } else { format!("{s}.0") }
}
