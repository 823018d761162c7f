package tokenizer

// GPT-2's byte-level alphabet: every byte maps to one printable rune, so any
// byte string is a string of "characters" that BPE merges can work on.
// Printable Latin-1 bytes map to themselves; the others (controls, space,
// 0x7F-0xA0, 0xAD) map to U+0100 upwards in byte order.
var (
	byteToRune [256]rune
	runeToByte = map[rune]byte{}
)

func init() {
	n := 0
	for b := 0; b < 256; b++ {
		printable := (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)
		if printable {
			byteToRune[b] = rune(b)
		} else {
			byteToRune[b] = rune(256 + n)
			n++
		}
		runeToByte[byteToRune[b]] = byte(b)
	}
}

// byteLevelSymbols maps the bytes of s to the byte-level alphabet, one
// symbol (a one-rune string) per byte.
func byteLevelSymbols(s string) []string {
	out := make([]string, len(s))
	for i := 0; i < len(s); i++ {
		out[i] = string(byteToRune[s[i]])
	}
	return out
}

// byteLevelString maps s to the byte-level alphabet as one string.
func byteLevelString(s string) string {
	rs := make([]rune, len(s))
	for i := 0; i < len(s); i++ {
		rs[i] = byteToRune[s[i]]
	}
	return string(rs)
}

// appendByteLevelDecoded appends the bytes a byte-level token stands for.
// Runes outside the alphabet (possible only in a hand-made vocabulary) are
// kept as their UTF-8 encoding.
func appendByteLevelDecoded(dst []byte, tok string) []byte {
	for _, r := range tok {
		if b, ok := runeToByte[r]; ok {
			dst = append(dst, b)
		} else {
			dst = append(dst, string(r)...)
		}
	}
	return dst
}
