#pragma once
// The part of mpp/impl/src.hpp on LibTorch: the Shm transport, the rendezvous and its store.
// mpp's own build compiles it as mpp_compiled (src/mpp.cpp), beside mpp_std_compiled.
// MPP_SEPARATE_COMPILATION must be defined, as for src.hpp.
#if !defined(MPP_SEPARATE_COMPILATION)
#error \
    "mpp: mpp/impl/src_torch.hpp is compiled with MPP_SEPARATE_COMPILATION defined, as is every unit of the program that uses mpp"
#endif

#include "mpp/config.hpp"

#include "mpp/comm/impl/rendezvous.ipp"
#include "mpp/comm/impl/shm_group.ipp"
#include "mpp/comm/impl/shm_mailbox.ipp"
#include "mpp/comm/impl/shm_reduce.ipp"
#include "mpp/comm/impl/shm_segment.ipp"
#include "mpp/comm/impl/shm_work.ipp"
#include "mpp/comm/impl/store.ipp"
