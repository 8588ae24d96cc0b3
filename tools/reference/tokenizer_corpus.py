# tokenizer_corpus.py -- generates a seeded multilingual test corpus and its HF `tokenizers` reference ids (Gemma 2 + 3).
#
# Usage (the machine needs the `tokenizers` package; no network):
#   python3 tools/reference/tokenizer_corpus.py --g2 gemma2/tokenizer.json --g3 gemma3/tokenizer.json \
#       --out tests/data/tokenizer/corpus.jsonl.gz [--n 6000] [--seed 20260301]
#   python3 tools/reference/tokenizer_corpus.py --texts-only --out /tmp/texts.jsonl   (no tokenizers needed)
#
# Output: gzip'd JSONL, one object per string: {"cat": ..., "text": ..., "g2": [ids], "g3": [ids]}
# ids are Tokenizer.encode(text, add_special_tokens=False).ids (no BOS). When decode(ids,
# skip_special_tokens=False) differs from the text, "g2d"/"g3d" holds the decoded text. Line 1 of the
# file is a header object {"header": {...}} naming versions and the seed. The strings are generated
# here from the seed alone (word lists below), so the corpus is reproducible anywhere.
import argparse
import gzip
import json
import random
import sys

EN_WORDS = """the of and to in is was for that on as with by he at from his it an were are which be this has
also or had not first one their its new after who they have her she two been other when there all during
into school time may years more most only over city some world would where later up such used many can
state about national out known university united then made however people three part million under
game city population second region because village system team students government american film while
music between river still world language house back long group both found each like well include
quick brown fox jumps lazy dog hello question answer model token engine offline private local weather
tomorrow yesterday computer science mathematics history energy water light sound machine learning
data value function variable string number table window door garden coffee morning evening""".split()

CODE_SNIPPETS = [
    "int main(int argc, char **argv) {\n    printf(\"%d\\n\", argc);\n    return 0;\n}\n",
    "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
    "for (let i = 0; i < arr.length; i++) {\n\tconsole.log(arr[i]);\n}",
    "SELECT id, name FROM users WHERE age >= 18 ORDER BY name;",
    "#include <stdio.h>\n#define MAX(a, b) ((a) > (b) ? (a) : (b))\n",
    "fn main() {\n    let v: Vec<u32> = (0..10).map(|x| x * x).collect();\n    println!(\"{:?}\", v);\n}",
    "class Foo:\n    def __init__(self):\n        self.x = {'a': [1, 2, 3]}\n",
    "if [ -f \"$HOME/.bashrc\" ]; then\n  . \"$HOME/.bashrc\"\nfi",
    "<div class=\"main\"><p>Hello &amp; welcome</p></div>",
    "{\"key\": [1, 2.5, null, true], \"nested\": {\"a\": \"b\"}}",
    "x = np.zeros((3, 4), dtype=np.float32)  # comment",
    "    return self.__dict__.get(key, None) or default_value;",
    "public static void main(String[] args) throws IOException {}",
    "a+=b;c-=d;e*=f;g/=h;i%=j;k<<=1;l>>=2;m&=n;o|=p;q^=r;",
    "git commit -m \"fix: handle CRLF\\r\\n line endings\"",
]

PHRASES = {
    "zh": ["你好，世界！", "今天天气很好。", "我们一起去吃饭吧", "机器学习是人工智能的一个分支。", "北京是中国的首都。",
           "这个问题很难回答", "谢谢你的帮助！", "繁體中文與简体中文"],
    "ja": ["こんにちは、世界！", "今日はいい天気ですね。", "東京は日本の首都です。", "カタカナとひらがな", "ありがとうございます",
           "機械学習は面白い。"],
    "ko": ["안녕하세요, 세계!", "오늘 날씨가 좋네요.", "서울은 한국의 수도입니다.", "감사합니다", "한국어 토크나이저 테스트"],
    "ar": ["مرحبا بالعالم", "اللغة العربية جميلة", "القاهرة عاصمة مصر", "شكرا جزيلا", "بِسْمِ اللَّهِ الرَّحْمَٰنِ الرَّحِيمِ"],
    "other": ["Привет, мир!", "Γειά σου κόσμε", "नमस्ते दुनिया", "สวัสดีชาวโลก", "שלום עולם", "Xin chào thế giới",
              "Zażółć gęślą jaźń", "Ça va? Très bien, merci.", "Straße Größe Übermaß", "ðþæøåß ÆØÅ"],
}

SPECIALS = ["<start_of_turn>", "<end_of_turn>", "<bos>", "<eos>", "<pad>", "<unk>", "<mask>", "<unused0>",
            "<unused5>", "<unused99>", "[@BOS@]", "<2mass>", "<h1>", "</h1>", "<code>", "</code>", "<table>",
            "<0x41>", "<0xE2>", "<start_of_image>", "<end_of_image>", "<image_soft_token>", "<start_of",
            "_turn>", "<<bos>>", "<start_of_turn>user\n", "<end_of_turn>\n", "<footer>", "<br>", "\u2581",
            "\u2581\u2581", "[multimodal]"]

EMOJI_BASE = [0x1F600, 0x1F602, 0x1F60D, 0x1F44D, 0x1F44B, 0x1F469, 0x1F468, 0x1F467, 0x1F466, 0x2764,
              0x1F525, 0x1F680, 0x1F308, 0x1F9D1, 0x1F3F3, 0x1F431, 0x1F436, 0x1F914, 0x1F973, 0x1FAE0,
              0x2600, 0x26A1, 0x1F1FA, 0x1F4A9, 0x1F9FF]
SKIN = [0x1F3FB, 0x1F3FC, 0x1F3FD, 0x1F3FE, 0x1F3FF]
ZWJ = "\u200d"
WS = [" ", "\t", "\n", "\r\n", "\u3000", "\u00a0"]


def valid_cp(r):
    while True:
        cp = r.randrange(0x110000)
        if not (0xD800 <= cp <= 0xDFFF):
            return chr(cp)


def rand_range(r, lo, hi, n):
    return "".join(chr(r.randint(lo, hi)) for _ in range(n))


def words(r, n):
    out = []
    for i in range(n):
        w = r.choice(EN_WORDS)
        if i == 0 or r.random() < 0.08:
            w = w.capitalize()
        if r.random() < 0.03:
            w = w.upper()
        out.append(w)
        if r.random() < 0.1:
            out[-1] += r.choice([",", ".", ";", ":", "!", "?", "'s", "n't", ")", "\""])
    return " ".join(out)


def emoji(r):
    parts = []
    for _ in range(r.randint(1, 5)):
        e = chr(r.choice(EMOJI_BASE))
        k = r.random()
        if k < 0.3:
            e += chr(r.choice(SKIN))
        elif k < 0.55:
            e = ZWJ.join(chr(r.choice(EMOJI_BASE)) + (chr(r.choice(SKIN)) if r.random() < 0.3 else "")
                         for _ in range(r.randint(2, 4)))
        elif k < 0.65:
            e += "\ufe0f"
        elif k < 0.75:
            e = chr(0x1F1E6 + r.randrange(26)) + chr(0x1F1E6 + r.randrange(26))
        parts.append(e)
    sep = r.choice(["", " ", " and ", "\n"])
    return sep.join(parts)


def number(r):
    k = r.randrange(9)
    if k == 0:
        return str(r.randrange(10 ** r.randint(1, 30)))
    if k == 1:
        return f"{r.uniform(-1e6, 1e6):.{r.randint(0, 8)}f}"
    if k == 2:
        return f"{r.randrange(1, 999)},{r.randrange(1000):03d},{r.randrange(1000):03d}"
    if k == 3:
        return f"+1 ({r.randrange(100, 999)}) {r.randrange(100, 999)}-{r.randrange(1000, 9999)}"
    if k == 4:
        return f"{r.randrange(1900, 2100)}-{r.randint(1, 12):02d}-{r.randint(1, 28):02d}T{r.randrange(24):02d}:{r.randrange(60):02d}Z"
    if k == 5:
        return f"{r.random():.3e}"
    if k == 6:
        return "0x" + "".join(r.choice("0123456789abcdefABCDEF") for _ in range(r.randint(1, 16)))
    if k == 7:
        return " ".join(str(r.randrange(10 ** r.randint(1, 6))) for _ in range(r.randint(2, 8)))
    return f"{r.randrange(100)}% of {r.randrange(10000)} = {r.uniform(0, 1000):.2f} (v{r.randrange(10)}.{r.randrange(20)}.{r.randrange(50)})"


def url(r):
    host = r.choice(["example.com", "www.google.com", "github.com", "localhost:8080", "127.0.0.1", "en.wikipedia.org",
                     "xn--bcher-kva.example", "sub.domain.co.uk"])
    path = "/".join(r.choice(EN_WORDS) for _ in range(r.randint(0, 4)))
    q = ""
    if r.random() < 0.5:
        q = "?" + "&".join(f"{r.choice(EN_WORDS)}={r.randrange(1000)}" for _ in range(r.randint(1, 3)))
    frag = "#" + r.choice(EN_WORDS) if r.random() < 0.2 else ""
    return f"{r.choice(['http', 'https', 'ftp', 'file'])}://{host}/{path}{q}{frag}"


def whitespace(r):
    out = []
    for _ in range(r.randint(1, 4)):
        run = "".join(r.choice([" ", "\t", "\n"]) if r.random() < 0.3 else r.choice(" \t\n") * r.randint(1, 20)
                      for _ in range(r.randint(1, 3)))
        out.append(run)
        if r.random() < 0.7:
            out.append(words(r, r.randint(1, 3)))
    return "".join(out)


def long_spaces(r):
    n = r.randint(20, 100)
    ch = r.choice([" ", " ", "\t", "\n", "\u2581"])
    s = ch * n
    k = r.randrange(3)
    if k == 0:
        return s + words(r, 2)
    if k == 1:
        return words(r, 2) + s + words(r, 1)
    return s


def rare(r):
    k = r.randrange(5)
    if k == 0:
        return "".join(valid_cp(r) for _ in range(r.randint(1, 8)))
    if k == 1:  # controls, NUL, noncharacters, BOM, zero-width
        pool = [chr(c) for c in range(0, 32)] + ["\x7f", "\x85", "\ufeff", "\u200b", "\u200c", "\ufffd", "\ufffe",
                                                 "\uffff", "\U0010ffff", "\U0001fffe", "\u00ad", "\u2028", "\u2029"]
        return "".join(r.choice(pool) if r.random() < 0.5 else r.choice(EN_WORDS) for _ in range(r.randint(1, 6)))
    if k == 2:  # combining marks
        return "".join(r.choice("aeiou") + "".join(chr(r.randint(0x300, 0x36F)) for _ in range(r.randint(1, 3)))
                       for _ in range(r.randint(1, 5)))
    if k == 3:  # private use, astral scripts
        return rand_range(r, 0xE000, 0xF8FF, r.randint(1, 3)) + rand_range(r, 0x10000, 0x1342F, r.randint(1, 4))
    return rand_range(r, 0x20000, 0x2A6DF, r.randint(1, 5))  # CJK extension B


def cjk(r):
    lang = r.choice(["zh", "ja", "ko", "ar", "other"])
    if r.random() < 0.5:
        return r.choice(PHRASES[lang])
    if lang == "zh":
        return rand_range(r, 0x4E00, 0x9FFF, r.randint(1, 20))
    if lang == "ja":
        return rand_range(r, 0x3041, 0x3096, r.randint(1, 10)) + rand_range(r, 0x30A1, 0x30FA, r.randint(0, 8))
    if lang == "ko":
        return rand_range(r, 0xAC00, 0xD7A3, r.randint(1, 12))
    if lang == "ar":
        return " ".join(rand_range(r, 0x0621, 0x064A, r.randint(2, 7)) for _ in range(r.randint(1, 4)))
    return rand_range(r, 0x0400, 0x04FF, r.randint(1, 10)) + " " + rand_range(r, 0x0900, 0x097F, r.randint(1, 6))


def special(r):
    parts = []
    for _ in range(r.randint(1, 5)):
        parts.append(r.choice(SPECIALS) if r.random() < 0.6 else words(r, r.randint(1, 2)))
    return r.choice(["", " ", "\n"]).join(parts)


def lead_trail(r):
    return r.choice(WS) * r.randint(1, 4) + words(r, r.randint(1, 5)) + r.choice(WS) * r.randint(0, 4)


def mixed(r):
    gens = [prose, cjk, emoji, number, url, special, rare, code]
    return r.choice(["", " ", "\n", " \t"]).join(r.choice(gens)(r) for _ in range(r.randint(2, 4)))


def prose(r):
    return words(r, r.randint(1, 40))


def code(r):
    s = r.choice(CODE_SNIPPETS)
    if r.random() < 0.3:
        s = s.replace("    ", "\t")
    if r.random() < 0.2:
        s = s.replace("\n", "\r\n")
    return s


CATS = [("prose", prose, 900), ("cjk_etc", cjk, 900), ("emoji", emoji, 500), ("code", code, 350),
        ("url", url, 300), ("number", number, 500), ("whitespace", whitespace, 600), ("long_space", long_spaces, 200),
        ("lead_trail", lead_trail, 300), ("special", special, 400), ("rare", rare, 500), ("mixed", mixed, 550)]


def generate(seed, scale):
    r = random.Random(seed)
    out = [("empty", "")]
    for cat, fn, n in CATS:
        for _ in range(int(n * scale)):
            out.append((cat, fn(r)))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--g2")
    ap.add_argument("--g3")
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=20260301)
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--texts-only", action="store_true")
    a = ap.parse_args()
    items = generate(a.seed, a.scale)
    if a.texts_only:
        with open(a.out, "w", encoding="utf-8") as f:
            for cat, t in items:
                f.write(json.dumps({"cat": cat, "text": t}, ensure_ascii=False) + "\n")
        print(len(items), "strings")
        return
    import tokenizers
    from tokenizers import Tokenizer
    toks = {"g2": Tokenizer.from_file(a.g2), "g3": Tokenizer.from_file(a.g3)}
    header = {"header": {"seed": a.seed, "scale": a.scale, "n": len(items), "tokenizers": tokenizers.__version__,
                         "ids": "encode(text, add_special_tokens=False).ids"}}
    n_tok = {"g2": 0, "g3": 0}
    with gzip.open(a.out, "wt", encoding="utf-8", compresslevel=9) as f:
        f.write(json.dumps(header) + "\n")
        for cat, t in items:
            rec = {"cat": cat, "text": t}
            for k, tk in toks.items():
                ids = tk.encode(t, add_special_tokens=False).ids
                with_bos = tk.encode(t, add_special_tokens=True).ids
                assert with_bos == [2] + ids, (k, t)
                rec[k] = ids
                n_tok[k] += len(ids)
                d = tk.decode(ids, skip_special_tokens=False)
                if d != t:
                    rec[k + "d"] = d
            f.write(json.dumps(rec, ensure_ascii=False, separators=(",", ":")) + "\n")
    print(len(items), "strings", n_tok, file=sys.stderr)


if __name__ == "__main__":
    main()
