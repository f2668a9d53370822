# Sourced by the scripts: ccache settings that let a fresh clone in another
# folder (CI) reuse the compiled objects of an earlier build on this machine.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$(pwd)}"
export CCACHE_NOHASHDIR=true
export CCACHE_MAXSIZE="${CCACHE_MAXSIZE:-8G}"
