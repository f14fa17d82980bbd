package dnswire

// Names here are uncompressed wire names: length-prefixed labels ending with
// the root label, as Query.Name returns them and as the caches key them.

// EqualFoldName reports whether two wire names are equal ignoring ASCII case
// (RFC 4343), the comparison 0x20 case restoration relies on.
func EqualFoldName(a, b []byte) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if x == y {
			continue
		}
		if x-'A' < 26 {
			x += 'a' - 'A'
		}
		if y-'A' < 26 {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

// IsLowerName reports whether a wire name has no upper-case ASCII letter, as
// cache keys must.
func IsLowerName(name []byte) bool {
	for _, c := range name {
		if c-'A' < 26 {
			return false
		}
	}
	return true
}

// InZone reports whether the wire name is zone or a name under it, both
// lower-cased. It walks the labels of name so that "xample.com" is not under
// "ample.com" by accident of bytes; used by cache flushes.
func InZone(name, zone []byte) bool {
	for off := 0; off < len(name); {
		if len(name)-off == len(zone) {
			return string(name[off:]) == string(zone)
		}
		if len(name)-off < len(zone) || name[off] == 0 {
			return false
		}
		off += 1 + int(name[off])
	}
	return false
}

// AppendNameText appends the presentation form of a wire name, with the
// trailing dot and with the escapes miekg/dns writes (a backslash before
// . space ' @ ; ( ) " \ and \DDD for bytes outside printable ASCII), so that
// logs and the slow path see the same text for the same name. It stops at a
// compression pointer or a malformed label; call it on names (*Query).Parse
// accepted.
func AppendNameText(dst, name []byte) []byte {
	if len(name) == 0 || name[0] == 0 {
		return append(dst, '.')
	}
	for off := 0; off < len(name); {
		l := int(name[off])
		if l == 0 || l&0xC0 != 0 || off+1+l > len(name) {
			break
		}
		for _, c := range name[off+1 : off+1+l] {
			switch {
			case c == '.' || c == ' ' || c == '\'' || c == '@' || c == ';' ||
				c == '(' || c == ')' || c == '"' || c == '\\':
				dst = append(dst, '\\', c)
			case c < ' ' || c > '~':
				dst = append(dst, '\\', '0'+c/100, '0'+c/10%10, '0'+c%10)
			default:
				dst = append(dst, c)
			}
		}
		dst = append(dst, '.')
		off += 1 + l
	}
	return dst
}
