# Sourced by tools/device-run.sh and tools/device-compare.sh: a bench row written
# [model:]h_q:b:topk (model v32 or dsv4; topk may be empty, for DSV4's rows) to the
# `mlajit bench` filter that keeps only that row.
#   bench_row_args ROW   sets the array row_args
bench_row_args() {
  local m="" h b k
  case $1 in
    *:*:*:*) IFS=: read -r m h b k <<<"$1" ;;
    *) IFS=: read -r h b k <<<"$1" ;;
  esac
  row_args=(--heads "$h" --batch "$b")
  [ -n "$k" ] && row_args+=(--topk "$k")
  [ -n "$m" ] && row_args=(--model "$m" "${row_args[@]}")
  return 0
}
