"""Where glibc's dynamic loader would find a library, worked out from the files alone.

The search follows ld.so(8), "Finding shared objects"
(https://man7.org/linux/man-pages/man8/ld.so.8.html), and the details it leaves out follow
glibc's elf/dl-load.c (_dl_map_object, open_path, open_verify):

  0. a name with a slash is a path, opened as it is (relative to the working directory);
     a name that an already loaded object answers to (the name it was asked for, its path or
     its DT_SONAME) is that object, wherever the file is;
  1. DT_RPATH of the object that asks, then of the object that loaded it, and so on up to the
     executable — only when the asking object has no DT_RUNPATH;
  2. LD_LIBRARY_PATH (':' or ';' separated; an empty entry is the working directory);
  3. DT_RUNPATH of the asking object itself (never inherited);
  4. the ld.so.cache (entries for this ABI);
  5. the trusted default directories, unless the asking object has DF_1_NODEFLIB.

In each directory the loader tries its glibc-hwcaps (and, before glibc 2.37, legacy hwcap)
subdirectories first. A candidate of the wrong ELF class or machine is passed over and the
search goes on; any other defect (not ELF, truncated, a directory) ends the search with an
error, as open_verify does. $ORIGIN, $LIB and $PLATFORM are expanded in RPATH, RUNPATH and
LD_LIBRARY_PATH; $ORIGIN is the directory of the path the object was opened by, symlinks not
resolved (dl-object.c), for the executable its real path.

One concern a module:
  loadable.py      what ld.so reads from one file (on facts/elf.py) and why it refuses one
  ldconfig.py      the ld.so.cache: `ldconfig -p` parsed, finding ldconfig, what it registers
  loader_facts.py  the running ld.so's $LIB, $PLATFORM, default dirs and hwcaps subdirs
  rpath.py         DT_RPATH, DT_RUNPATH and LD_LIBRARY_PATH entries expanded to directories
  runtime_names.py the sonames a library keeps for dlopen, and the names it tries for each
  read_once.py     each file read once per command while it stays as it was
  environment.py   what one process's loader works from
  search.py        the search for one name, in ld.so's order (steps 1 to 5 above)
  process.py       an emulated process: objects loaded with their DT_NEEDED entries
  closure.py       everything a set of libraries brings in, DT_NEEDED and dlopen alike

Nothing here reads os.environ or runs the loader unless asked: the environment, the cache
entries and the loader's own facts are parameters, so tests control them.
"""
