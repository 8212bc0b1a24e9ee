//go:build cgo

package nvml

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stddef.h>
#include <stdlib.h>

// drakit_dlopen_error opens name as go-nvml does and returns the dynamic
// loader's message when that fails (NULL when it loads).
static const char *drakit_dlopen_error(const char *name) {
	void *h = dlopen(name, RTLD_LAZY | RTLD_GLOBAL);
	if (h != NULL) {
		dlclose(h);
		return NULL;
	}
	return dlerror();
}
*/
import "C"

import (
	"fmt"
	"strings"
	"unsafe"
)

// loadError is why lib (a file name for the loader's search, or a path)
// cannot be loaded, in the dynamic loader's words: go-nvml reports only
// "library not found", which is wrong where the library is there and a
// library it needs is not (a container image without glibc's libm,
// libpthread, libdl or librt, which libnvidia-ml needs). The error wraps
// ErrLibraryNotFound and names lib and, where that is what failed, the
// missing dependency.
func loadError(lib string) error {
	name := C.CString(lib)
	defer C.free(unsafe.Pointer(name))
	var why string
	if msg := C.drakit_dlopen_error(name); msg != nil {
		why = C.GoString(msg)
	}
	if dep, ok := missingDependency(lib, why); ok {
		return fmt.Errorf(
			"open NVML: cannot load %s: %w: %s is there, but a library it needs is not: %s (the "+
				"dynamic loader: %s); in a container image, the image must carry it",
			lib,
			ErrLibraryNotFound,
			lib,
			dep,
			why,
		)
	}
	if why == "" {
		why = "go-nvml could not load it"
	}
	return fmt.Errorf(
		"open NVML: cannot load %s: %w (the dynamic loader: %s); %s",
		lib,
		ErrLibraryNotFound,
		why,
		simulatorHint,
	)
}

// missingDependency reads the dynamic loader's message about lib: when
// it names another library that cannot be opened ("libm.so.6: cannot
// open shared object file: ..."), that library.
func missingDependency(lib, why string) (string, bool) {
	file, rest, ok := strings.Cut(why, ": ")
	if !ok || !strings.Contains(rest, "cannot open shared object file") {
		return "", false
	}
	if file == lib || strings.HasSuffix(lib, "/"+file) || strings.HasSuffix(file, "/"+lib) {
		return "", false
	}
	return file, true
}
