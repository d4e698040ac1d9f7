// Package atomicfile replaces a file whole: written to a temporary file
// beside it, synced, then renamed over it, so a crash leaves the old
// content or the new one, never a part (TestWrite).
package atomicfile
