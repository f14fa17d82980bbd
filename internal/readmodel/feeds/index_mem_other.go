//go:build !linux

package feeds

// adviseHuge does nothing: huge-page advice is Linux's (index_mem_linux.go).
func adviseHuge([]byte) {}

// collapseEdges does nothing: huge pages are Linux's.
func collapseEdges(string) {}
