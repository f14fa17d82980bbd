package resolver

import (
	"github.com/miekg/dns"

	"github.com/svc-pf/svc-pf/internal/resolver/dnswire"
)

// padBlock is the block length encrypted replies are padded to: the
// response block length the padding policy for DNS over encrypted
// transports recommends (468 bytes), so that the reply's length says
// little about the name asked.
const padBlock = 468

// padReply pads an encrypted reply with the EDNS padding option to a
// multiple of padBlock, when it carries an OPT record (the client sent
// EDNS, and so can take options): clients that pad their own queries
// (kdig, browsers, Android) get the padding they ask for, and those that
// do not still get replies whose length hides the answer. A reply without
// OPT goes unchanged (an option cannot be added to it), as does one that
// would then grow past the largest message. Padding an existing padding
// option replaces it. wire is not modified; the result may be wire.
func padReply(wire []byte) []byte {
	if len(wire) < 12 || wire[10] == 0 && wire[11] == 0 {
		return wire // no additional record, so no OPT: nothing to unpack
	}
	var m dns.Msg
	if m.Unpack(wire) != nil {
		return wire
	}
	opt := m.IsEdns0()
	if opt == nil {
		return wire
	}
	kept := opt.Option[:0]
	for _, o := range opt.Option {
		if o.Option() != dns.EDNS0PADDING {
			kept = append(kept, o)
		}
	}
	pad := &dns.EDNS0_PADDING{}
	opt.Option = append(kept, pad)
	m.Compress = true
	b, err := m.Pack()
	if err != nil {
		return wire
	}
	n := (padBlock - len(b)%padBlock) % padBlock
	if len(b)+n > dnswire.MaxMsgLen {
		return wire
	}
	if n == 0 {
		return b
	}
	pad.Padding = make([]byte, n)
	if b, err = m.Pack(); err != nil {
		return wire
	}
	return b
}
