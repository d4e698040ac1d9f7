//go:build unix

package agentd

import "syscall"

// diskUsage returns the size and the free bytes (for an unprivileged
// user) of the filesystem holding dir, zeros when unknown.
func diskUsage(dir string) (total, free uint64) {
	var st syscall.Statfs_t
	if syscall.Statfs(dir, &st) != nil {
		return 0, 0
	}
	bs := uint64(st.Bsize) // int64 on linux, uint32 on darwin
	return st.Blocks * bs, st.Bavail * bs
}
