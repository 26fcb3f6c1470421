" Drives llama.vim as a user does, in a headless Neovim: in insert mode at the cursor, the
" plugin's trigger key (<C-F> here) asks the server for a completion; once its suggestion is
" shown, the plugin's accept key (<Tab>) takes it whole. The buffer and the plugin's cache of
" raw server answers are then written out, and Neovim quits (exit 1 on timeout).
"
" Read from the environment: LLAMA_VIM_ENDPOINT (the /infill URL), LLAMA_VIM_LINE and
" LLAMA_VIM_COL (the cursor, 1-based), LLAMA_VIM_OUT (a folder for buffer.txt, cache.json
" and, on timeout, error.txt), LLAMA_VIM_TIMEOUT_S.
let g:llama_config = {
    \ 'endpoint_fim': $LLAMA_VIM_ENDPOINT,
    \ 'auto_fim': v:false,
    \ 'ring_n_chunks': 0,
    \ 'show_info': 0,
    \ 'keymap_fim_trigger': '<C-F>',
    \ 'keymap_fim_accept_full': '<Tab>',
    \ }
runtime! plugin/llama.vim

let s:start = reltime()
let s:out = $LLAMA_VIM_OUT

function! s:finish(timer) abort
    call writefile(getline(1, '$'), s:out . '/buffer.txt')
    call writefile([json_encode(g:cache_data)], s:out . '/cache.json')
    qall!
endfunction

function! s:poll(timer) abort
    if llama#is_fim_hint_shown()
        call feedkeys("\<Tab>", 'm')
        call timer_start(300, function('s:finish'))
        return
    endif
    if reltimefloat(reltime(s:start)) > str2float($LLAMA_VIM_TIMEOUT_S)
        call writefile(['no suggestion shown; mode ' . mode(), execute('messages')],
            \ s:out . '/error.txt')
        cquit 1
    endif
    call timer_start(100, function('s:poll'))
endfunction

call cursor(str2nr($LLAMA_VIM_LINE), str2nr($LLAMA_VIM_COL))
call feedkeys("i\<C-F>", 'm')
call timer_start(100, function('s:poll'))
