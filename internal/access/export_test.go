package access

// LimiterSize is how many clients the failure limit tracks.
func (g *Guard) LimiterSize() int { return g.limiter.size() }
