package orgmanager

import (
	"strconv"

	"github.com/svc-pf/svc-pf/internal/httpapi"
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
	dst = httpapi.AppendJSONString(dst, dirtySince)
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
				dst = httpapi.AppendJSONString(append(dst, f.key...), f.val)
			}
		}
		dst = append(dst, '}')
	}
	return append(dst, "]}\n"...)
}
