//! Driver labs on rnic (docs/labs/README.md): each lab is a part of a driver to write,
//! a skeleton to start from (`exercises/`), a reference solution (`solutions/`), and a
//! checker that runs a solution against a deterministic device and judges it step by
//! step, with the cause of the first failure and the datasheet section to read.
//!
//! - [`nic`]: what lab code may do to a function ([`nic::Nic`]), the checkers' recording
//!   device ([`nic::LabDevice`]) and the adapter to a real function.
//! - [`report`]: the verdicts.
//! - One module per lab: its interface, its steps and its checker.

pub mod exercises;
pub mod lab1;
pub mod lab2;
pub mod lab3;
pub mod lab4;
pub mod lab5;
pub mod lab6;
pub mod lab7;
pub mod lab8;
pub mod lab9;
pub mod nic;
pub mod report;
pub mod solutions;

use nic::Nic;
use report::Report;

/// The labs, by number: their titles.
pub const LABS: [(u32, &str); 9] = [
    (1, lab1::TITLE),
    (2, lab2::TITLE),
    (3, lab3::TITLE),
    (4, lab4::TITLE),
    (5, lab5::TITLE),
    (6, lab6::TITLE),
    (7, lab7::TITLE),
    (8, lab8::TITLE),
    (9, lab9::TITLE),
];

/// Checks lab `lab`'s exercise (`solution == false`) or its reference solution.
pub fn check(lab: u32, solution: bool) -> Option<Report> {
    Some(match (lab, solution) {
        (1, false) => lab1::check(exercises::lab1::identify),
        (1, true) => lab1::check(solutions::lab1::identify),
        (2, false) => lab2::check(exercises::lab2::start),
        (2, true) => lab2::check(solutions::lab2::start),
        (3, false) => lab3::check(lab3::Code {
            create: exercises::lab3::create,
            connect: exercises::lab3::connect,
        }),
        (3, true) => lab3::check(lab3::Code {
            create: solutions::lab3::create,
            connect: solutions::lab3::connect,
        }),
        (4, false) => lab4::check(lab4::Code {
            post: exercises::lab4::post,
            poll: exercises::lab4::poll,
        }),
        (4, true) => lab4::check(lab4::Code {
            post: solutions::lab4::post,
            poll: solutions::lab4::poll,
        }),
        (5, false) => lab5::check(lab5::Code {
            enable: exercises::lab5::enable,
            write_and_wait: exercises::lab5::write_and_wait,
        }),
        (5, true) => lab5::check(lab5::Code {
            enable: solutions::lab5::enable,
            write_and_wait: solutions::lab5::write_and_wait,
        }),
        (6, false) => lab6::check(exercises::lab6::parse),
        (6, true) => lab6::check(solutions::lab6::parse),
        (7, false) => lab7::check(lab7::Code {
            connect: exercises::lab7::connect,
            run: exercises::lab7::run,
            recover: exercises::lab7::recover,
        }),
        (7, true) => lab7::check(lab7::Code {
            connect: solutions::lab7::connect,
            run: solutions::lab7::run,
            recover: solutions::lab7::recover,
        }),
        (8, false) => lab8::check(lab8::Code {
            migrate: exercises::lab8::migrate,
            depart: exercises::lab8::depart,
            adopt: exercises::lab8::adopt,
        }),
        (8, true) => lab8::check(lab8::Code {
            migrate: solutions::lab8::migrate,
            depart: solutions::lab8::depart,
            adopt: solutions::lab8::adopt,
        }),
        (9, false) => lab9::check(lab9::Code {
            open: exercises::lab9::open,
            send: exercises::lab9::send,
            reclaim: exercises::lab9::reclaim,
            recv: exercises::lab9::recv,
        }),
        (9, true) => lab9::check(lab9::Code {
            open: solutions::lab9::open,
            send: solutions::lab9::send,
            reclaim: solutions::lab9::reclaim,
            recv: solutions::lab9::recv,
        }),
        _ => return None,
    })
}

/// Runs lab `lab`'s exercise (or its reference solution) on a real function: a line that
/// says what it did, or why it failed. Ends with a reset of the function, so that the
/// device stops using the program's memory.
pub fn run(lab: u32, solution: bool, nic: &dyn Nic) -> Option<nic::Result<String>> {
    let outcome = match (lab, solution) {
        (1, false) => lab1::run(nic, exercises::lab1::identify),
        (1, true) => lab1::run(nic, solutions::lab1::identify),
        (2, false) => lab2::run(nic, exercises::lab2::start),
        (2, true) => lab2::run(nic, solutions::lab2::start),
        (3, false) => lab3::run(
            nic,
            lab3::Code {
                create: exercises::lab3::create,
                connect: exercises::lab3::connect,
            },
        ),
        (3, true) => lab3::run(
            nic,
            lab3::Code {
                create: solutions::lab3::create,
                connect: solutions::lab3::connect,
            },
        ),
        (4, false) => lab4::run(
            nic,
            lab4::Code {
                post: exercises::lab4::post,
                poll: exercises::lab4::poll,
            },
        ),
        (4, true) => lab4::run(
            nic,
            lab4::Code {
                post: solutions::lab4::post,
                poll: solutions::lab4::poll,
            },
        ),
        (5, false) => lab5::run(
            nic,
            lab5::Code {
                enable: exercises::lab5::enable,
                write_and_wait: exercises::lab5::write_and_wait,
            },
        ),
        (5, true) => lab5::run(
            nic,
            lab5::Code {
                enable: solutions::lab5::enable,
                write_and_wait: solutions::lab5::write_and_wait,
            },
        ),
        (6.., _) => Err(format!(
            "lab {lab} runs on the lab device only (it needs a capture, faults or several \
             functions at once): rnic-lab check {lab}"
        )),
        _ => return None,
    };
    let _ = nic.reg_write(
        rnic_abi::regs::DEVICE_CONTROL,
        rnic_abi::regs::CONTROL_RESET,
    );
    Some(outcome)
}
