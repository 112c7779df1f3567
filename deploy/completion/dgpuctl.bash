# bash completion for dgpuctl.
#
# Install: copy this file to /usr/share/bash-completion/completions/dgpuctl, or add
#   source <(dgpuctl completion bash)
# to ~/.bashrc.

_dgpuctl_task_ids() {
  local -a server_args=()
  [[ -n $1 ]] && server_args=(--server "$1")
  "${COMP_WORDS[0]}" "${server_args[@]}" get tasks --limit 200 --no-headers 2>/dev/null |
    while read -r id _; do printf '%s\n' "$id"; done
}

_dgpuctl_team_names() {
  local -a server_args=()
  [[ -n $1 ]] && server_args=(--server "$1")
  "${COMP_WORDS[0]}" "${server_args[@]}" get teams --no-headers 2>/dev/null |
    while read -r name _; do printf '%s\n' "$name"; done
}

_dgpuctl_agent_ids() {
  local -a server_args=()
  [[ -n $1 ]] && server_args=(--server "$1")
  "${COMP_WORDS[0]}" "${server_args[@]}" get agents --no-headers 2>/dev/null |
    while read -r id _; do printf '%s\n' "$id"; done
}

_dgpuctl() {
  local cur="${COMP_WORDS[COMP_CWORD]}"
  local prev=""
  ((COMP_CWORD > 0)) && prev="${COMP_WORDS[COMP_CWORD - 1]}"
  local global_opts="--server --token --cacert -o --output --timeout --request-timeout --no-headers \
--help --version"
  local value_opts=" --server --token --cacert -o --output --timeout --request-timeout --gpus \
--priority --model \
--name --env --image --team --preemption-grace --array --max-retries --retry-backoff --status --limit --offset --after --interval \
--online --batch --max-gpus --weight --grace "

  # Find the command, its subcommand and --server, skipping options and their values.
  local cmd="" sub="" server="" i=1 word
  while ((i < COMP_CWORD)); do
    word="${COMP_WORDS[i]}"
    if [[ $word == -- ]]; then
      COMPREPLY=($(compgen -c -- "$cur"))
      return 0
    elif [[ $word == --server ]]; then
      server="${COMP_WORDS[i + 1]}"
      ((i += 2))
      continue
    elif [[ $value_opts == *" $word "* ]]; then
      ((i += 2))
      continue
    elif [[ $word != -* ]]; then
      if [[ -z $cmd ]]; then
        cmd="$word"
      elif [[ -z $sub ]]; then
        sub="$word"
      fi
    fi
    ((i += 1))
  done

  case "$prev" in
    --cacert)
      COMPREPLY=($(compgen -f -- "$cur"))
      return 0
      ;;
    --token)
      return 0
      ;;
    -o | --output)
      COMPREPLY=($(compgen -W "table json wide" -- "$cur"))
      return 0
      ;;
    --priority)
      COMPREPLY=($(compgen -W "high low" -- "$cur"))
      return 0
      ;;
    --status)
      COMPREPLY=($(compgen -W "pending running success failed cancelled" -- "$cur"))
      return 0
      ;;
    --team)
      COMPREPLY=($(compgen -W "$(_dgpuctl_team_names "$server")" -- "$cur"))
      return 0
      ;;
    --max-gpus)
      COMPREPLY=($(compgen -W "none" -- "$cur"))
      return 0
      ;;
  esac
  if [[ $value_opts == *" $prev "* ]]; then
    return 0
  fi

  local words=""
  case "$cmd" in
    "")
      words="submit get quota team snapshot cancel wait events usage logs top cordon uncordon drain completion"
      [[ $cur == -* ]] && words="$global_opts"
      ;;
    submit)
      words="--gpus --priority --model --name --env --timeout --image --team --no-preempt \
--preemption-grace --array --max-retries --retry-backoff --help --"
      ;;
    get)
      case "$sub" in
        "") words="tasks task teams team gpus agents" ;;
        tasks) words="--status --priority --team --limit --offset --after --watch --help" ;;
        task)
          if [[ $cur == -* ]]; then
            words="--help"
          else
            words="$(_dgpuctl_task_ids "$server")"
          fi
          ;;
        teams | team)
          if [[ $cur == -* ]]; then
            words="--help"
          else
            words="$(_dgpuctl_team_names "$server")"
          fi
          ;;
        *) words="--help" ;;
      esac
      ;;
    quota)
      case "$sub" in
        "") words="set --help" ;;
        *) words="--online --help" ;;
      esac
      ;;
    team)
      case "$sub" in
        "") words="set delete" ;;
        set | delete)
          if [[ $cur == -* ]]; then
            words="--help"
            [[ $sub == set ]] && words="--online --batch --max-gpus --weight --help"
          else
            words="$(_dgpuctl_team_names "$server")"
          fi
          ;;
        *) words="--help" ;;
      esac
      ;;
    cancel | wait | events | logs)
      if [[ $cur == -* ]]; then
        case "$cmd" in
          wait) words="--timeout --interval --help" ;;
          events) words="--help" ;;
          logs) words="-f --follow --tail --rank --help" ;;
          *) words="--grace --help" ;;
        esac
      else
        words="$(_dgpuctl_task_ids "$server")"
      fi
      ;;
    usage)
      words="--from --to --by --help"
      [[ $prev == --by ]] && words="team user"
      ;;
    cordon | uncordon | drain)
      if [[ $cur == -* ]]; then
        words="--help"
        [[ $cmd == drain ]] && words="--evict --grace --help"
      else
        words="$(_dgpuctl_agent_ids "$server")"
      fi
      ;;
    snapshot)
      if [[ $cur == -* ]]; then
        words="--force --help"
      else
        COMPREPLY=($(compgen -f -- "$cur"))
        return 0
      fi
      ;;
    completion)
      [[ -z $sub ]] && words="bash"
      ;;
  esac
  COMPREPLY=($(compgen -W "$words" -- "$cur"))
  return 0
}

complete -F _dgpuctl dgpuctl
