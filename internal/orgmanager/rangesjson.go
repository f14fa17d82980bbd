package orgmanager

import (
	"strconv"
	"unicode/utf8"

	"github.com/svc-pf/svc-pf/internal/ranges"
)

// appendRangesBody renders GET effective-ranges by hand: an organisation may
// have hundreds of thousands of ranges, and reflection-based encoding of
// one struct per range costs more than computing them.
func appendRangesBody(dst []byte, version int64, dirty bool, dirtySince string, rs []ranges.Range) []byte {
	dst = append(dst, `{"version":`...)
	dst = strconv.AppendInt(dst, version, 10)
	dst = append(dst, `,"dirty":`...)
	dst = strconv.AppendBool(dst, dirty)
	dst = append(dst, `,"dirty_since":`...)
	dst = appendJSONString(dst, dirtySince)
	dst = append(dst, `,"ranges":[`...)
	for i, r := range rs {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"from":"`...)
		dst = r.From.AppendTo(dst)
		dst = append(dst, `","to":"`...)
		dst = r.To.AppendTo(dst)
		dst = append(dst, `","orig_cidr":"`...)
		dst = r.Orig.AppendTo(dst)
		dst = append(dst, '"')
		for _, f := range [...]struct{ key, val string }{
			{`,"username":`, r.Attrs.Username}, {`,"deviceid":`, r.Attrs.DeviceID}, {`,"location":`, r.Attrs.Location},
		} {
			if f.val != "" {
				dst = appendJSONString(append(dst, f.key...), f.val)
			}
		}
		dst = append(dst, '}')
	}
	return append(dst, "]}\n"...)
}

// appendJSONString quotes s as encoding/json does with HTML escaping off:
// quote, backslash and control characters escaped, invalid UTF-8 replaced
// by U+FFFD, U+2028 and U+2029 escaped.
func appendJSONString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 || r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			switch r {
			case utf8.RuneError:
				dst = append(dst, `\ufffd`...)
			default:
				dst = append(dst, '\\', 'u', '2', '0', '2', hex[r&0xf])
			}
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
