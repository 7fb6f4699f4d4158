package procsec

import (
	"bytes"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

func harden() error { return unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0) }

// scrubEnvironBlock overwrites, in the environment block the process
// started with (what /proc/self/environ shows; Go works on a copy), the
// values of secret variables with zeros. Best effort: it writes through
// /proc/self/mem and gives up quietly where that is not possible.
func scrubEnvironBlock() {
	stat, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return
	}
	// Fields after the command name in parentheses, which may hold spaces.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return
	}
	fields := strings.Fields(string(stat[i+1:]))
	// env_start and env_end are fields 50 and 51 of proc(5); fields[0] is field 3.
	if len(fields) < 49 {
		return
	}
	start, err1 := strconv.ParseUint(fields[47], 10, 64)
	end, err2 := strconv.ParseUint(fields[48], 10, 64)
	if err1 != nil || err2 != nil || end <= start {
		return
	}
	block, err := os.ReadFile("/proc/self/environ")
	if err != nil || uint64(len(block)) > end-start {
		return
	}
	mem, err := os.OpenFile("/proc/self/mem", os.O_RDWR, 0)
	if err != nil {
		return
	}
	defer mem.Close()
	off := 0
	for _, entry := range bytes.Split(block, []byte{0}) {
		if name, value, ok := bytes.Cut(entry, []byte{'='}); ok && IsSecretName(string(name)) && len(value) > 0 {
			at := int64(start) + int64(off+len(name)+1)
			_, _ = mem.WriteAt(make([]byte, len(value)), at)
		}
		off += len(entry) + 1
	}
}
