package radius

import (
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"layeh.com/radius"
	"layeh.com/radius/rfc2866"
)

// BenchmarkAcknowledged measures acknowledged Accounting-Requests per
// second against a real IP Mapper on an embedded NATS server: 32 NAS
// sockets each keep a window of 64 Starts (each a new session with its
// own /32) outstanding, retransmitting whatever stays unanswered for a
// second. One op is one acknowledged request. bench/radius.sh runs it.
func BenchmarkAcknowledged(b *testing.B) {
	e := startEnv(b, func(c *Config) { c.WriteTimeout = 5 * time.Second })
	const nases, window = 32, 64
	var next atomic.Int64
	var acked atomic.Int64
	total := int64(b.N)
	// Packets prepared up front: the benchmark measures the server.
	reqs := make([][]byte, b.N)
	n := e.nas(testSecret)
	for i := range reqs {
		ip := netip.AddrFrom4([4]byte{100, byte(64 + i>>16&63), byte(i >> 8), byte(i)})
		p := n.acct(rfc2866.AcctStatusType_Value_Start, fmt.Sprintf("bench-%d", i), framedIP(ip.String()), userName(fmt.Sprintf("u%d", i)))
		p.Identifier = byte(i)
		reqs[i] = n.encode(p)
	}
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for range nases {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(e.addr))
			if err != nil {
				b.Error(err)
				return
			}
			defer c.Close()
			// Outstanding requests by Identifier (one socket: a window
			// of at most 256 ids).
			pending := map[byte]int{}
			sent := map[byte]time.Time{}
			buf := make([]byte, 4096)
			for {
				for len(pending) < window {
					i := next.Add(1) - 1
					if i >= total {
						break
					}
					id := byte(i)
					if _, busy := pending[id]; busy {
						next.Add(-1) // retry later; ids wrap
						break
					}
					pending[id], sent[id] = int(i), time.Now()
					_, _ = c.Write(reqs[i])
				}
				if len(pending) == 0 {
					return
				}
				_ = c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
				k, err := c.Read(buf)
				if err == nil && k >= 20 {
					if i, ok := pending[buf[1]]; ok && radius.IsAuthenticResponse(buf[:k], reqs[i], []byte(testSecret)) {
						delete(pending, buf[1])
						acked.Add(1)
					}
				}
				for id, at := range sent {
					if _, ok := pending[id]; ok && time.Since(at) > time.Second {
						sent[id] = time.Now()
						_, _ = c.Write(reqs[pending[id]])
					}
				}
			}
		}()
	}
	wg.Wait()
	el := time.Since(start)
	b.StopTimer()
	if acked.Load() != total {
		b.Fatalf("acknowledged %d of %d", acked.Load(), total)
	}
	b.ReportMetric(float64(total)/el.Seconds(), "acked/s")
	sum, count := e.histogram("svcpf_radius_batch_size")
	b.ReportMetric(sum/count, "reqs/call")
	sum, count = e.histogram("svcpf_radius_mapper_write_seconds")
	b.ReportMetric(sum/count*1000, "ms/call")
}

// histogram sums a histogram's series: sum and count of observations.
func (e *env) histogram(name string) (sum, count float64) {
	mfs, _ := e.reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.Metric {
				sum += m.GetHistogram().GetSampleSum()
				count += float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return sum, count
}
